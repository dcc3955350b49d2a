//! Test only: a SQLite VFS shim that simulates a power cut.
//!
//! [`install`] registers, as the process's default VFS, a shim over the platform's VFS
//! (`unix`). Files outside every [`Session`]'s folder pass straight through. For a file
//! inside a session's folder the shim keeps, in memory, the **durable image** (what the
//! last `xSync` of that file made durable) and the **pending operations** since (each
//! `xWrite` and `xTruncate`, in order); the write itself also goes to the real file, so
//! SQLite reads back what it wrote, as from an OS page cache. `xSync` does not reach the
//! disk (nothing real needs to be durable): it folds the file's pending operations into
//! its durable image. Locks, shared memory (`-shm`) and reads are the platform VFS's own.
//!
//! A session counts every write, truncate and sync of its files; at the one chosen (the
//! Nth, or [`Session::cut_now`]) the power goes: that operation and every later write,
//! truncate, sync or delete of the session's files fails with an I/O error and changes
//! nothing. [`Session::surviving`] then gives what a disk would hold after the cut: each
//! file's durable image with, as [`Tear`] says, none, an in-order prefix, or a random
//! subset of its pending operations torn in (a write torn in may land only in part: a
//! prefix of its bytes, cut at a 512-byte sector). Files deleted before the cut are gone;
//! a file created and never synced survives empty.
//!
//! [`Session::set_full`] fills the disk instead: writes and truncates answer `SQLITE_FULL`
//! and change nothing until it is freed (a full disk without root or a filesystem of
//! one's own).
//!
//! Left out: the `-shm` file (SQLite rebuilds the WAL index from the WAL after a crash);
//! a directory's own durability (a delete is durable at once, a created file always
//! exists); writes torn within a sector, or spilling outside their range (SQLite's unix
//! VFS declares `POWERSAFE_OVERWRITE`, which rules both out); memory-mapped I/O (`xFetch`
//! answers "no mapping", so every page write is an `xWrite`).

// FFI: a VFS is a table of C callbacks over raw file structs SQLite allocates; there is no
// safe way to register one. This crate is a dev-dependency only.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use rusqlite::ffi;

/// The name the shim registers under.
pub const VFS_NAME: &str = "fronta-powercut";
/// A torn write lands in whole sectors of this size.
pub const SECTOR: usize = 512;

/// What of the pending (unsynced) operations a cut lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// Only what was synced survives.
    Clean,
    /// Each file: its pending operations in order up to a random one, that last one
    /// possibly in part.
    Prefix,
    /// Each file: every pending operation with even odds, each write possibly in part.
    Subset,
}

impl Tear {
    pub const ALL: [Tear; 3] = [Tear::Clean, Tear::Prefix, Tear::Subset];
}

/// A small seeded generator (SplitMix64): the crash points and the tears replay from a
/// seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write { offset: usize, data: Vec<u8> },
    Truncate(usize),
}

impl Op {
    /// Apply to `image`; a write lands only in its first `keep` bytes.
    fn apply(&self, image: &mut Vec<u8>, keep: Option<usize>) {
        match self {
            Op::Write { offset, data } => {
                let data = &data[..keep.unwrap_or(data.len()).min(data.len())];
                let end = offset + data.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[*offset..end].copy_from_slice(data);
            }
            Op::Truncate(len) => image.truncate(*len),
        }
    }
}

#[derive(Debug, Default)]
struct Image {
    durable: Vec<u8>,
    pending: Vec<Op>,
}

#[derive(Debug)]
struct SessionState {
    root: PathBuf,
    files: HashMap<PathBuf, Image>,
    /// Writes, truncates and syncs of the session's files so far.
    ops: u64,
    cut_at: Option<u64>,
    cut: bool,
    /// While set, writes and truncates answer `SQLITE_FULL` (a full disk) and change
    /// nothing; syncs go on.
    full: bool,
}

#[derive(Debug, Default)]
struct Registry {
    next: u64,
    sessions: HashMap<u64, SessionState>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A power-cut scope: the files under one folder. Dropping it forgets them (their handles
/// still open then behave as if the power were off).
#[derive(Debug)]
pub struct Session {
    id: u64,
}

/// What a cut let through, summed over the files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Survival {
    pub files: usize,
    /// Pending operations when the power went.
    pub pending: usize,
    /// Of those, how many reached the image (wholly or in part).
    pub torn_in: usize,
    /// Of those, writes that landed only in part.
    pub partial: usize,
}

impl Session {
    /// Track every file under `root` (an existing folder), cutting the power at the
    /// `cut_at`th write/truncate/sync (1-based; `None`: only [`cut_now`](Self::cut_now)).
    /// [`install`] must have run.
    pub fn start(root: &Path, cut_at: Option<u64>) -> std::io::Result<Session> {
        let root = root.canonicalize()?;
        let mut registry = registry();
        registry.next += 1;
        let id = registry.next;
        registry.sessions.insert(
            id,
            SessionState {
                root,
                files: HashMap::new(),
                ops: 0,
                cut_at,
                cut: false,
                full: false,
            },
        );
        Ok(Session { id })
    }

    fn with<T>(&self, f: impl FnOnce(&mut SessionState) -> T) -> T {
        let mut registry = registry();
        let state = registry
            .sessions
            .get_mut(&self.id)
            .expect("invariant: a live session is registered");
        f(state)
    }

    /// Writes, truncates and syncs counted so far (the cut's one included).
    pub fn ops(&self) -> u64 {
        self.with(|state| state.ops)
    }

    /// Whether the power is off.
    pub fn is_cut(&self) -> bool {
        self.with(|state| state.cut)
    }

    /// Cut the power now.
    pub fn cut_now(&self) {
        self.with(|state| state.cut = true);
    }

    /// Fill the disk (`true`: every later write and truncate of the session's files
    /// answers `SQLITE_FULL` and changes nothing, as `ENOSPC` does) or free it again.
    pub fn set_full(&self, full: bool) {
        self.with(|state| state.full = full);
    }

    /// What the disk holds after the cut, file name (relative to the folder) → bytes, with
    /// the pending operations let through as `tear` says, drawn from `rng`.
    pub fn surviving(&self, tear: Tear, rng: &mut Rng) -> (Vec<(PathBuf, Vec<u8>)>, Survival) {
        self.with(|state| {
            let mut figures = Survival::default();
            let mut names: Vec<&PathBuf> = state.files.keys().collect();
            names.sort();
            let mut out = Vec::new();
            for name in names {
                let image = &state.files[name];
                let mut bytes = image.durable.clone();
                figures.files += 1;
                figures.pending += image.pending.len();
                match tear {
                    Tear::Clean => {}
                    Tear::Prefix => {
                        let count = rng.between(0, image.pending.len() as u64) as usize;
                        for op in &image.pending[..count] {
                            land(op, &mut bytes, &mut figures, rng);
                        }
                    }
                    Tear::Subset => {
                        for op in &image.pending {
                            if rng.next_u64() & 1 == 0 {
                                land(op, &mut bytes, &mut figures, rng);
                            }
                        }
                    }
                }
                let relative = name.strip_prefix(&state.root).unwrap_or(name).to_path_buf();
                out.push((relative, bytes));
            }
            (out, figures)
        })
    }

    /// [`surviving`](Self::surviving), written into the folder `to`.
    pub fn write_surviving(
        &self,
        tear: Tear,
        rng: &mut Rng,
        to: &Path,
    ) -> std::io::Result<Survival> {
        let (files, figures) = self.surviving(tear, rng);
        for (name, bytes) in files {
            let path = to.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, bytes)?;
        }
        Ok(figures)
    }
}

/// Let `op` through onto `bytes`; one write in four lands only in part (whole sectors).
fn land(op: &Op, bytes: &mut Vec<u8>, figures: &mut Survival, rng: &mut Rng) {
    let keep = match op {
        Op::Write { data, .. } if rng.between(0, 3) == 0 => {
            let sectors = data.len().div_ceil(SECTOR) as u64;
            figures.partial += 1;
            Some(rng.between(0, sectors.saturating_sub(1)) as usize * SECTOR)
        }
        _ => None,
    };
    op.apply(bytes, keep);
    figures.torn_in += 1;
}

impl Drop for Session {
    fn drop(&mut self) {
        registry().sessions.remove(&self.id);
    }
}

/// Which session tracks `path`, reading the file's current bytes as its durable image the
/// first time (a file made before the session counts as synced).
fn track(path: &Path) -> Option<u64> {
    let mut registry = registry();
    let (id, state) = registry
        .sessions
        .iter_mut()
        .find(|(_, state)| path.starts_with(&state.root))?;
    state
        .files
        .entry(path.to_path_buf())
        .or_insert_with(|| Image {
            durable: std::fs::read(path).unwrap_or_default(),
            pending: Vec::new(),
        });
    Some(*id)
}

/// What the power-cut check answers for one operation of a tracked file.
enum Gate {
    /// Go ahead (and record it).
    Go,
    /// The power is off: fail.
    Off,
    /// The disk is full: a write fails with `SQLITE_FULL`.
    Full,
}

/// Count an operation of `path` in session `id`; the chosen one cuts the power.
/// `grows`: the operation needs space (a write or a truncate).
fn gate(id: u64, registry: &mut Registry, grows: bool) -> Gate {
    let Some(state) = registry.sessions.get_mut(&id) else {
        return Gate::Off;
    };
    if state.cut {
        return Gate::Off;
    }
    if grows && state.full {
        return Gate::Full;
    }
    state.ops += 1;
    if state.cut_at.is_some_and(|at| state.ops >= at) {
        state.cut = true;
        return Gate::Off;
    }
    Gate::Go
}

/// The shim's file: SQLite's base struct, then ours, then the platform VFS's file.
#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    /// The tracking session's id, 0 = not tracked.
    session: u64,
    /// The full path of a tracked file (owned; freed at close).
    path: *mut PathBuf,
    /// The platform VFS's file, inside this same allocation.
    inner: *mut ffi::sqlite3_file,
}

/// Where the platform VFS's file starts in a [`ShimFile`]'s allocation.
const INNER_OFFSET: usize = std::mem::size_of::<ShimFile>().next_multiple_of(16);

struct Platform(*mut ffi::sqlite3_vfs);
// SAFETY: the platform VFS is a static table SQLite never frees or changes.
unsafe impl Send for Platform {}
unsafe impl Sync for Platform {}

static PLATFORM: OnceLock<Platform> = OnceLock::new();

fn platform() -> *mut ffi::sqlite3_vfs {
    PLATFORM.get().expect("invariant: install ran").0
}

/// Register the shim as the default VFS, once per process. Every connection opened after
/// this goes through it; only files under a [`Session`]'s folder are tracked.
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS (static, never freed);
        // the shim's table is leaked, so it outlives every connection.
        unsafe {
            ffi::sqlite3_initialize();
            let base = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!base.is_null(), "invariant: SQLite has a default VFS");
            let _ = PLATFORM.set(Platform(base));
            let mut vfs = *base;
            vfs.pNext = std::ptr::null_mut();
            vfs.szOsFile = (INNER_OFFSET + (*base).szOsFile as usize) as c_int;
            vfs.zName = c"fronta-powercut".as_ptr();
            vfs.xOpen = Some(shim_open);
            vfs.xDelete = Some(shim_delete);
            let vfs = Box::leak(Box::new(vfs));
            let rc = ffi::sqlite3_vfs_register(vfs, 1);
            assert_eq!(rc, ffi::SQLITE_OK, "register the power-cut VFS");
        }
    });
}

fn methods() -> &'static ffi::sqlite3_io_methods {
    static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
        iVersion: 3,
        xClose: Some(shim_close),
        xRead: Some(shim_read),
        xWrite: Some(shim_write),
        xTruncate: Some(shim_truncate),
        xSync: Some(shim_sync),
        xFileSize: Some(shim_file_size),
        xLock: Some(shim_lock),
        xUnlock: Some(shim_unlock),
        xCheckReservedLock: Some(shim_check_reserved_lock),
        xFileControl: Some(shim_file_control),
        xSectorSize: Some(shim_sector_size),
        xDeviceCharacteristics: Some(shim_device_characteristics),
        xShmMap: Some(shim_shm_map),
        xShmLock: Some(shim_shm_lock),
        xShmBarrier: Some(shim_shm_barrier),
        xShmUnmap: Some(shim_shm_unmap),
        xFetch: Some(shim_fetch),
        xUnfetch: Some(shim_unfetch),
    };
    &METHODS
}

/// The shim's struct behind SQLite's file pointer.
///
/// # Safety
/// `file` is a file this VFS opened (SQLite only calls our methods on those).
unsafe fn shim<'a>(file: *mut ffi::sqlite3_file) -> &'a mut ShimFile {
    // SAFETY: by the caller; ShimFile starts with the base struct (repr(C)).
    unsafe { &mut *(file as *mut ShimFile) }
}

/// The platform file's method table.
///
/// # Safety
/// As [`shim`].
unsafe fn inner_methods<'a>(file: &ShimFile) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: the platform VFS opened `inner` successfully, so its table is set.
    unsafe { &*(*file.inner).pMethods }
}

unsafe extern "C" fn shim_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands a zeroed allocation of szOsFile bytes; the platform's file
    // lives INNER_OFFSET bytes in; `name` is NULL or a NUL-terminated full path.
    unsafe {
        let shim = file as *mut ShimFile;
        let inner = (file as *mut u8).add(INNER_OFFSET) as *mut ffi::sqlite3_file;
        (*shim).base.pMethods = std::ptr::null();
        (*shim).session = 0;
        (*shim).path = std::ptr::null_mut();
        (*shim).inner = inner;
        let base = platform();
        let open = (*base)
            .xOpen
            .expect("invariant: the platform VFS opens files");
        let rc = open(base, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        if !name.is_null() {
            let path = PathBuf::from(CStr::from_ptr(name).to_string_lossy().into_owned());
            if let Some(id) = track(&path) {
                (*shim).session = id;
                (*shim).path = Box::into_raw(Box::new(path));
            }
        }
        (*shim).base.pMethods = methods();
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn shim_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: `name` is a NUL-terminated path.
    let path = PathBuf::from(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    );
    {
        let mut registry = registry();
        let tracked = registry
            .sessions
            .iter()
            .find(|(_, state)| path.starts_with(&state.root))
            .map(|(id, _)| *id);
        if let Some(id) = tracked {
            if let Gate::Off = gate(id, &mut registry, false) {
                return ffi::SQLITE_IOERR_DELETE;
            }
            if let Some(state) = registry.sessions.get_mut(&id) {
                state.files.remove(&path);
            }
        }
    }
    let base = platform();
    // SAFETY: forwarding the same arguments to the platform VFS.
    unsafe {
        let delete = (*base)
            .xDelete
            .expect("invariant: the platform VFS deletes");
        delete(base, name, sync_dir)
    }
}

unsafe extern "C" fn shim_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of this VFS; its path box is ours and freed once.
    unsafe {
        let shim = shim(file);
        if !shim.path.is_null() {
            drop(Box::from_raw(shim.path));
            shim.path = std::ptr::null_mut();
        }
        let close = inner_methods(shim).xClose.expect("invariant: xClose");
        close(shim.inner)
    }
}

unsafe extern "C" fn shim_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xRead.expect("invariant: xRead"))(shim.inner, buf, amount, offset)
    }
}

unsafe extern "C" fn shim_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: `buf` holds `amount` bytes; forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        if let Some(code) = record(shim, ffi::SQLITE_IOERR_WRITE, || Op::Write {
            offset: offset as usize,
            data: std::slice::from_raw_parts(buf as *const u8, amount as usize).to_vec(),
        }) {
            return code;
        }
        (inner_methods(shim).xWrite.expect("invariant: xWrite"))(shim.inner, buf, amount, offset)
    }
}

/// Passes a write or a truncate of a tracked file through the gate and records its `op`
/// among the file's unsynced changes; `Some(code)` when the cut (`off`) or a full disk
/// answers instead of the platform file.
fn record(shim: &ShimFile, off: c_int, op: impl FnOnce() -> Op) -> Option<c_int> {
    if shim.session == 0 {
        return None;
    }
    let mut registry = registry();
    match gate(shim.session, &mut registry, true) {
        Gate::Off => return Some(off),
        Gate::Full => return Some(ffi::SQLITE_FULL),
        Gate::Go => {}
    }
    if let Some(image) = image(&mut registry, shim) {
        image.pending.push(op());
    }
    None
}

/// The tracked image of `shim`'s file.
fn image<'a>(registry: &'a mut Registry, shim: &ShimFile) -> Option<&'a mut Image> {
    // SAFETY: a tracked file's path box lives until its close.
    let path = unsafe { &*shim.path };
    registry
        .sessions
        .get_mut(&shim.session)?
        .files
        .get_mut(path)
}

unsafe extern "C" fn shim_truncate(
    file: *mut ffi::sqlite3_file,
    size: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        if let Some(code) = record(shim, ffi::SQLITE_IOERR_TRUNCATE, || {
            Op::Truncate(size as usize)
        }) {
            return code;
        }
        (inner_methods(shim).xTruncate.expect("invariant: xTruncate"))(shim.inner, size)
    }
}

unsafe extern "C" fn shim_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        if shim.session == 0 {
            return (inner_methods(shim).xSync.expect("invariant: xSync"))(shim.inner, flags);
        }
        let mut registry = registry();
        if let Gate::Off = gate(shim.session, &mut registry, false) {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        // Durable now: the pending operations fold into the image. The real file needs
        // no fsync (its durability is simulated).
        if let Some(image) = image(&mut registry, shim) {
            for op in std::mem::take(&mut image.pending) {
                op.apply(&mut image.durable, None);
            }
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn shim_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xFileSize.expect("invariant: xFileSize"))(shim.inner, size)
    }
}

unsafe extern "C" fn shim_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xLock.expect("invariant: xLock"))(shim.inner, level)
    }
}

unsafe extern "C" fn shim_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xUnlock.expect("invariant: xUnlock"))(shim.inner, level)
    }
}

unsafe extern "C" fn shim_check_reserved_lock(
    file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim)
            .xCheckReservedLock
            .expect("invariant: xCheckReservedLock"))(shim.inner, out)
    }
}

unsafe extern "C" fn shim_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim)
            .xFileControl
            .expect("invariant: xFileControl"))(shim.inner, op, arg)
    }
}

unsafe extern "C" fn shim_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim)
            .xSectorSize
            .expect("invariant: xSectorSize"))(shim.inner)
    }
}

unsafe extern "C" fn shim_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim)
            .xDeviceCharacteristics
            .expect("invariant: xDeviceCharacteristics"))(shim.inner)
    }
}

unsafe extern "C" fn shim_shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xShmMap.expect("invariant: xShmMap"))(
            shim.inner, page, size, extend, out,
        )
    }
}

unsafe extern "C" fn shim_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xShmLock.expect("invariant: xShmLock"))(shim.inner, offset, n, flags)
    }
}

unsafe extern "C" fn shim_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim)
            .xShmBarrier
            .expect("invariant: xShmBarrier"))(shim.inner)
    }
}

unsafe extern "C" fn shim_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: forwarding to the platform file.
    unsafe {
        let shim = shim(file);
        (inner_methods(shim).xShmUnmap.expect("invariant: xShmUnmap"))(shim.inner, delete)
    }
}

unsafe extern "C" fn shim_fetch(
    _file: *mut ffi::sqlite3_file,
    _offset: ffi::sqlite3_int64,
    _amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // No memory mapping: SQLite reads with xRead and writes with xWrite.
    // SAFETY: `out` is SQLite's out-pointer.
    unsafe { *out = std::ptr::null_mut() };
    ffi::SQLITE_OK
}

unsafe extern "C" fn shim_unfetch(
    _file: *mut ffi::sqlite3_file,
    _offset: ffi::sqlite3_int64,
    _page: *mut c_void,
) -> c_int {
    ffi::SQLITE_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn rows(path: &Path) -> (String, i64) {
        let conn = Connection::open(path).expect("open the surviving image");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .expect("integrity_check");
        let count: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .expect("count");
        (check, count)
    }

    #[test]
    fn a_clean_cut_keeps_every_synced_commit_and_loses_the_rest() {
        install();
        let dir = tempfile::tempdir().expect("a folder");
        let session = Session::start(dir.path(), None).expect("a session");
        let conn = Connection::open(dir.path().join("db")).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (x)",
        )
        .expect("set up");
        for x in 0..20 {
            conn.execute("INSERT INTO t VALUES (?1)", [x])
                .expect("a synced commit");
        }
        conn.execute_batch("PRAGMA synchronous = OFF")
            .expect("no more syncs");
        for x in 20..30 {
            conn.execute("INSERT INTO t VALUES (?1)", [x])
                .expect("an unsynced commit");
        }
        session.cut_now();
        assert!(
            conn.execute("INSERT INTO t VALUES (99)", []).is_err(),
            "a write after the cut fails"
        );
        drop(conn);
        let after = tempfile::tempdir().expect("a folder");
        session
            .write_surviving(Tear::Clean, &mut Rng(1), after.path())
            .expect("write the image");
        assert_eq!(
            rows(&after.path().join("db")),
            ("ok".into(), 20),
            "the synced commits survive, the unsynced ones do not"
        );
    }

    #[test]
    fn torn_cuts_leave_a_whole_database_with_every_synced_commit() {
        install();
        for seed in 0..30u64 {
            let dir = tempfile::tempdir().expect("a folder");
            let mut rng = Rng(seed);
            let session = Session::start(dir.path(), Some(rng.between(5, 60))).expect("a session");
            let conn = Connection::open(dir.path().join("db")).expect("open");
            let mut acked = 0;
            if conn
                .execute_batch(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE t (x)",
                )
                .is_ok()
            {
                for x in 0..40 {
                    if conn
                        .execute("INSERT INTO t VALUES (randomblob(3000))", [])
                        .is_err()
                    {
                        break;
                    }
                    acked = x + 1;
                }
            }
            drop(conn);
            session.cut_now();
            let tear = Tear::ALL[(seed % 3) as usize];
            let after = tempfile::tempdir().expect("a folder");
            session
                .write_surviving(tear, &mut rng, after.path())
                .expect("write the image");
            let conn = Connection::open(after.path().join("db")).expect("reopen");
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .expect("integrity_check");
            assert_eq!(check, "ok", "seed {seed} ({tear:?}): integrity");
            let count: i64 = conn
                .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
                .unwrap_or(0);
            assert!(
                count >= acked,
                "seed {seed} ({tear:?}): {acked} acknowledged inserts, {count} survived"
            );
        }
    }
}
