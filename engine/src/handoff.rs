//! The hand-off between a [`crate::Dispatcher`] and an idle [`crate::Worker`] of the same
//! process: an enqueue that finds the worker waiting with a free slot has the store insert
//! its run already claimed ([`crate::RunStore::run_enqueue_started`]) and passes it to the
//! worker through this intake — one commit from enqueue to start instead of two (the
//! enqueue's, then the claim's).
//!
//! # Contract
//!
//! ```text
//!             claim came back short             wake-up, poll, shutdown
//!   closed ───────────────────────────► open ───────────────────────────► closed
//!     ▲        (worker waits idle)        │      (worker claims again)
//!     │                                   │ reserve (free > reserved)
//!     │                                   ▼
//!     └──────────── deliver / drop ── reserved ── store call in flight
//! ```
//!
//! - The intake is *open* only while the worker waits after a claim round that came back
//!   short (it found nothing more due) and before any wake-up: so a hand-off never takes a
//!   slot from a run the worker already knows to be waiting. Any wake-up closes it, and
//!   the worker claims as usual.
//! - A reservation holds one free slot: the worker claims only into its free slots less
//!   the reserved ones, so a delivered run always has a slot.
//! - A reservation ends by [`Reservation::deliver`] (the worker starts the run) or by being
//!   dropped (the store queued the run instead; the slot is free again).
//! - A run delivered to a worker that has stopped is handed back to the caller, which
//!   gives it back to the store (`Release`): a hand-off never strands a running run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::liveness::ProcessId;
use crate::store::ClaimedRun;

#[derive(Debug, Default)]
struct Gate {
    open: bool,
    /// Slots the worker could start a run in now.
    free: usize,
    /// Reservations taken and not yet delivered or dropped.
    reserved: usize,
}

/// The worker's side of the hand-off. Shared (`Arc`) with its dispatcher.
#[derive(Debug)]
pub struct Intake {
    gate: Mutex<Gate>,
    tx: mpsc::UnboundedSender<ClaimedRun>,
    leases: HashMap<String, Duration>,
    default_lease: Duration,
    holder: Option<ProcessId>,
}

impl Intake {
    /// An intake and the receiver the worker starts handed runs from.
    pub(crate) fn new(
        leases: HashMap<String, Duration>,
        default_lease: Duration,
        holder: Option<ProcessId>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ClaimedRun>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let intake = Self {
            gate: Mutex::new(Gate::default()),
            tx,
            leases,
            default_lease,
            holder,
        };
        (Arc::new(intake), rx)
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lease a handed run of `kind` is claimed with (the worker's, as a claim would).
    pub fn lease_of(&self, kind: &str) -> Duration {
        self.leases.get(kind).copied().unwrap_or(self.default_lease)
    }

    /// The process the worker belongs to, written as the holder of a handed run.
    pub fn holder(&self) -> Option<ProcessId> {
        self.holder
    }

    /// The worker waits idle with `free` slots: open.
    pub(crate) fn open(&self, free: usize) {
        let mut gate = self.gate();
        gate.open = true;
        gate.free = free;
    }

    /// The worker is about to claim (or stop): no new reservations.
    pub(crate) fn close(&self) {
        self.gate().open = false;
    }

    /// Runs reserved and not yet delivered: slots the worker must not claim into.
    pub(crate) fn reserved(&self) -> usize {
        self.gate().reserved
    }

    /// The worker took a delivered run from its receiver.
    pub(crate) fn taken(&self) {
        let mut gate = self.gate();
        gate.reserved = gate.reserved.saturating_sub(1);
        gate.free = gate.free.saturating_sub(1);
    }

    /// Whether the worker waits idle with a slot no reservation holds: an enqueue now
    /// would be handed over.
    pub fn is_open(&self) -> bool {
        let gate = self.gate();
        gate.open && gate.reserved < gate.free
    }

    /// One free slot of an open intake, or `None`.
    pub fn reserve(self: &Arc<Self>) -> Option<Reservation> {
        let mut gate = self.gate();
        if !gate.open || gate.reserved >= gate.free {
            return None;
        }
        gate.reserved += 1;
        Some(Reservation {
            intake: Some(self.clone()),
        })
    }
}

/// One reserved slot of a worker. Dropped undelivered, it frees the slot.
#[derive(Debug)]
pub struct Reservation {
    intake: Option<Arc<Intake>>,
}

impl Reservation {
    /// Hand the claimed run to the worker. `Err` gives the run back when the worker has
    /// stopped: the caller must release it.
    pub fn deliver(mut self, run: ClaimedRun) -> Result<(), Box<ClaimedRun>> {
        let Some(intake) = self.intake.take() else {
            return Err(Box::new(run));
        };
        // The slot stays reserved until the worker takes the run (`Intake::taken`).
        intake.tx.send(run).map_err(|mpsc::error::SendError(run)| {
            let mut gate = intake.gate();
            gate.reserved = gate.reserved.saturating_sub(1);
            Box::new(run)
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(intake) = self.intake.take() {
            let mut gate = intake.gate();
            gate.reserved = gate.reserved.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_intake_reserves_nothing() {
        let (intake, _rx) = Intake::new(HashMap::new(), Duration::from_secs(30), None);
        assert!(intake.reserve().is_none());
        intake.open(1);
        intake.close();
        assert!(intake.reserve().is_none());
    }

    #[test]
    fn reservations_never_outnumber_the_free_slots_and_a_dropped_one_frees_its_slot() {
        let (intake, _rx) = Intake::new(HashMap::new(), Duration::from_secs(30), None);
        intake.open(2);
        let first = intake.reserve().expect("a first slot");
        let second = intake.reserve().expect("a second slot");
        assert!(intake.reserve().is_none(), "only two slots are free");
        assert_eq!(intake.reserved(), 2);
        drop(first);
        assert_eq!(intake.reserved(), 1);
        assert!(
            intake.reserve().is_some(),
            "the dropped reservation freed its slot"
        );
        drop(second);
    }

    #[test]
    fn leases_are_the_kinds_own_else_the_default() {
        let leases = HashMap::from([("durable".to_owned(), Duration::from_secs(90))]);
        let (intake, _rx) = Intake::new(leases, Duration::from_secs(30), None);
        assert_eq!(intake.lease_of("durable"), Duration::from_secs(90));
        assert_eq!(intake.lease_of("other"), Duration::from_secs(30));
    }
}
