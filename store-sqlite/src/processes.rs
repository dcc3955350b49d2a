//! The process registry on SQLite (`processes`, migration 19): register, beat, list,
//! deregister, and the takeover of a dead process's running runs (their leases end now,
//! so the next claim reclaims them with a fresh owner token). The rules that judge a
//! process dead are `fronta_engine::liveness`'s; this module only reads and writes.

use fronta_engine::liveness::{ProcessFacts, ProcessId, ProcessRecord};
use fronta_engine::store::StoreResult as SqlResult;
use rusqlite::{Connection, params};

use crate::map_err;
use crate::writer::WriterState;

fn id_bytes(id: ProcessId) -> Vec<u8> {
    id.0.as_bytes().to_vec()
}

/// Write (or rewrite) `id`'s row, beating now.
pub fn register(conn: &Connection, id: ProcessId, facts: &ProcessFacts, now: i64) -> SqlResult<()> {
    conn.prepare_cached(
        "INSERT INTO processes (id, host, pid, started, beat_at, registered_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
         ON CONFLICT (id) DO UPDATE SET host = ?2, pid = ?3, started = ?4, beat_at = ?5",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            id_bytes(id),
            facts.host,
            facts.pid,
            facts.started,
            now
        ])
    })
    .map_err(map_err)?;
    Ok(())
}

/// Beat now; `false` when the row is gone (taken over).
pub fn beat(conn: &Connection, id: ProcessId, now: i64) -> SqlResult<bool> {
    let changed = conn
        .prepare_cached("UPDATE processes SET beat_at = ?1 WHERE id = ?2")
        .and_then(|mut stmt| stmt.execute(params![now, id_bytes(id)]))
        .map_err(map_err)?;
    Ok(changed == 1)
}

/// `RunStore::process_deregister`: delete this process's row (a clean exit).
pub fn deregister(conn: &Connection, id: ProcessId) -> SqlResult<()> {
    conn.prepare_cached("DELETE FROM processes WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([id_bytes(id)]))
        .map_err(map_err)?;
    Ok(())
}

/// `RunStore::process_list`: every registered process, oldest registration first.
pub fn list(conn: &Connection) -> SqlResult<Vec<ProcessRecord>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, host, pid, started, beat_at FROM processes ORDER BY registered_at",
        )
        .map_err(map_err)?;
    let rows = stmt
        .query_map([], |row| {
            let id: Vec<u8> = row.get(0)?;
            let id = uuid::Uuid::from_slice(&id).map_err(|err| {
                rusqlite::Error::FromSqlConversionFailure(
                    0,
                    rusqlite::types::Type::Blob,
                    Box::new(err),
                )
            })?;
            let beat_at: i64 = row.get(4)?;
            Ok(ProcessRecord {
                id: ProcessId(id),
                facts: ProcessFacts {
                    host: row.get(1)?,
                    pid: row.get(2)?,
                    started: row.get(3)?,
                },
                beat_at: chrono::DateTime::from_timestamp_millis(beat_at).unwrap_or_default(),
            })
        })
        .and_then(Iterator::collect)
        .map_err(map_err)?;
    Ok(rows)
}

/// End the leases of `dead`'s running runs (just before now: the next claim reclaims
/// them) and delete its row; answers how many runs were released.
pub fn takeover(
    state: &mut WriterState,
    conn: &Connection,
    dead: ProcessId,
    now: i64,
) -> SqlResult<u64> {
    let released = conn
        .prepare_cached(
            "UPDATE runs INDEXED BY runs_held SET locked_until = ?1 - 1 \
             WHERE locked_proc = ?2 AND status = 1 AND locked_until >= ?1",
        )
        .and_then(|mut stmt| stmt.execute(params![now, id_bytes(dead)]))
        .map_err(map_err)?;
    deregister(conn, dead)?;
    if released > 0 {
        state.enqueued = true;
    }
    Ok(released as u64)
}
