//! Ticket events on their way to the automations listening to them, the same on every
//! store: the sink is called (a panic in it fails the write that announced, never the
//! writer or the task that made it), and a run the sink answered that cannot be inserted
//! fails the write with a message naming the run, the event and the ticket. Which writes
//! announce, and the event itself, are the desk's plan (`fronta_desk::plan::announcement`,
//! `TicketEvent::of`); the stores probe the listeners and insert the runs in the write's
//! transaction.

use fronta_desk::DeskError;
use fronta_desk::store::TicketEvent;
use fronta_engine::NewRun;

use crate::store::{Listener, TicketEventSink};

/// The runs `sink` answers for `event` heard by `listeners`; a panicking sink is an
/// `Internal` error naming the event and the ticket.
pub fn runs_of(
    sink: &TicketEventSink,
    event: &TicketEvent,
    listeners: &[Listener],
) -> Result<Vec<NewRun>, DeskError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(event, listeners))).map_err(
        |_| {
            DeskError::Internal(format!(
                "the ticket event sink panicked on {} of {}",
                event.kind.as_str(),
                event.ticket.human_id()
            ))
        },
    )
}

/// `err`, the failure to insert `runs` (triggered by `event`), with what was being done in
/// front of its message; its kind stays (a conflict stays a conflict).
pub fn not_inserted(event: &TicketEvent, runs: &[NewRun], err: DeskError) -> DeskError {
    let context = match runs {
        [run] => format!(
            "run {} triggered by {} of {} cannot be inserted",
            run.id,
            event.kind.as_str(),
            event.ticket.human_id()
        ),
        runs => format!(
            "{} runs triggered by {} of {} cannot be inserted",
            runs.len(),
            event.kind.as_str(),
            event.ticket.human_id()
        ),
    };
    err.within(&context)
}

/// Where a store keeps its ticket event sink: installed by the process that runs work
/// (replacing any sink before), read by every ticket write; clones of a store share one.
#[derive(Default)]
pub struct SinkSlot(std::sync::RwLock<Option<TicketEventSink>>);

impl SinkSlot {
    pub fn set(&self, sink: TicketEventSink) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sink);
    }

    /// The installed sink, if any.
    pub fn get(&self) -> Option<TicketEventSink> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use fronta_desk::store::{TicketEventKind, TicketWrite};
    use fronta_desk::{Origin, TenantId, Ticket, TicketId};

    use super::*;

    fn event() -> TicketEvent {
        let now = chrono::Utc::now();
        let write = TicketWrite {
            ticket: Ticket {
                id: TicketId::new(),
                tenant: TenantId::new(),
                number: 7,
                external_id: None,
                title: "Order".into(),
                ticket_type: None,
                status: None,
                closed: false,
                tags: vec![],
                assignee: None,
                group: None,
                fields: BTreeMap::new(),
                created_at: now,
                updated_at: now,
            },
            created: true,
            change: BTreeMap::new(),
        };
        TicketEvent::of(&write, TicketEventKind::Created, Origin::Person)
    }

    #[test]
    fn a_panicking_sink_fails_the_write_naming_the_event() {
        let sink: TicketEventSink = Arc::new(|_, _| panic!("a bug in a listener"));
        let err = runs_of(&sink, &event(), &[]).expect_err("the panic is an error");
        assert_eq!(
            err,
            DeskError::Internal("the ticket event sink panicked on ticket.created of TK-7".into()),
            "names the event and the ticket"
        );
    }

    #[test]
    fn a_run_that_cannot_be_inserted_keeps_its_error_kind_with_context() {
        let err = not_inserted(&event(), &[], DeskError::Unavailable("disk full".into()));
        assert_eq!(
            err,
            DeskError::Unavailable(
                "0 runs triggered by ticket.created of TK-7 cannot be inserted: disk full".into()
            ),
            "unavailable stays unavailable, so the caller may retry"
        );
    }
}
