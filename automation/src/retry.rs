//! Retryable or not — DESIGN.md §4.5 as data, the one rule every layer uses. A failure is
//! described by its [`Cause`]; [`Cause::retryable`] answers from the table below, and the
//! default for anything not listed as retryable is "no": retrying bad input repeats the
//! same error, and retrying a call that may have happened can do it twice.
//!
//! | retried (ladder, honouring Retry-After)            | ends at once, opens an incident |
//! |---|---|
//! | connection error, timeout before the request was sent | 401, 403, 404 and other 4xx |
//! | 5xx and 429 from the other service                 | bad input, missing output, explicit fail |
//! | our storage unavailable                             | missing or paused automation, missing group |
//! | MCP: connection error, 408, 425, 429, 502, 503, 504 | MCP: timeout of a sent `tools/call`; a bug (panic) |
//! | SMTP: connection error, timeout before the message data was sent, a 4xx reply | SMTP: a 5xx reply; a timeout or a broken connection after the message data was sent (it may have been sent) |
//!
//! Rows this table adds where §4.5 is silent, each "no" by its default: a timeout or a
//! broken connection **after** the request was sent (it may have happened), an answer we
//! cannot use (over the size limit, too many redirects), and missing platform
//! configuration (no connector installed, no secret key).

use std::time::Duration;

use crate::steps::StepError;

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Could not connect, or the connection broke before the request was sent.
    Connection,
    /// Timed out before the request was sent.
    TimeoutBeforeSend,
    /// The other service answered with this HTTP status.
    HttpStatus(u16),
    /// Our own storage did not answer.
    StorageUnavailable,
    /// The step's input is wrong (a template, a type, a value).
    BadInput,
    /// A step's output that a later step needs is missing.
    MissingOutput,
    /// The automation said to fail.
    ExplicitFail,
    /// The automation was deleted or is paused.
    MissingOrPausedAutomation,
    /// The group (or another named thing of the desk) does not exist.
    MissingGroup,
    /// MCP: the connection to the server failed.
    McpConnection,
    /// MCP: the server answered `tools/call` with this status (HTTP transport).
    McpStatus(u16),
    /// MCP: a `tools/call` was sent and timed out: it may have happened, and MCP has no
    /// idempotency key, so only the server knows whether a second call is a second order.
    McpTimeoutAfterSend,
    /// A bug in our code (a panic): it does not go away in a minute.
    Bug,
    /// The request was sent and no answer came in time: the other service may have
    /// acted on it, so a second request could do it twice.
    TimeoutAfterSend,
    /// The connection broke after the request was sent (same doubt as a timeout).
    BrokenAfterSend,
    /// The other service answered something we cannot use: a body over the size limit,
    /// more redirects than allowed.
    BadAnswer,
    /// The platform lacks configuration the step needs (no connector installed, no
    /// secret key, a key version that is not configured): a person must act.
    NotConfigured,
    /// SMTP: the mail server answered with this reply code. A 4xx is transient by the
    /// protocol's own definition (the server did not take the message and asks to be
    /// tried again); a 5xx is permanent. See `crate::mail::classify`.
    SmtpReply(u16),
}

impl Cause {
    /// The table's answer.
    pub fn retryable(&self) -> bool {
        match self {
            Cause::Connection | Cause::TimeoutBeforeSend | Cause::StorageUnavailable => true,
            Cause::HttpStatus(status) => *status == 429 || (500..=599).contains(status),
            Cause::McpConnection => true,
            Cause::McpStatus(status) => matches!(status, 408 | 425 | 429 | 502 | 503 | 504),
            Cause::SmtpReply(code) => (400..=499).contains(code),
            Cause::BadInput
            | Cause::MissingOutput
            | Cause::ExplicitFail
            | Cause::MissingOrPausedAutomation
            | Cause::MissingGroup
            | Cause::McpTimeoutAfterSend
            | Cause::Bug
            | Cause::TimeoutAfterSend
            | Cause::BrokenAfterSend
            | Cause::BadAnswer
            | Cause::NotConfigured => false,
        }
    }

    /// A step error for this cause: retryable per the table, with the other side's
    /// Retry-After when it gave one (only a retryable cause keeps it).
    pub fn step_error(
        &self,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> StepError {
        let retryable = self.retryable();
        StepError {
            retryable,
            retry_after: if retryable { retry_after } else { None },
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_table_answers_as_designed() {
        let retried = [
            Cause::Connection,
            Cause::TimeoutBeforeSend,
            Cause::HttpStatus(500),
            Cause::HttpStatus(503),
            Cause::HttpStatus(599),
            Cause::HttpStatus(429),
            Cause::StorageUnavailable,
            Cause::McpConnection,
            Cause::McpStatus(408),
            Cause::McpStatus(425),
            Cause::McpStatus(429),
            Cause::McpStatus(502),
            Cause::McpStatus(503),
            Cause::McpStatus(504),
            Cause::SmtpReply(421),
            Cause::SmtpReply(450),
            Cause::SmtpReply(451),
            Cause::SmtpReply(452),
        ];
        for cause in retried {
            assert!(cause.retryable(), "{cause:?} is retried");
        }
        let final_ = [
            Cause::HttpStatus(401),
            Cause::HttpStatus(403),
            Cause::HttpStatus(404),
            Cause::HttpStatus(400),
            Cause::HttpStatus(422),
            Cause::BadInput,
            Cause::MissingOutput,
            Cause::ExplicitFail,
            Cause::MissingOrPausedAutomation,
            Cause::MissingGroup,
            Cause::McpStatus(500),
            Cause::McpStatus(501),
            Cause::McpTimeoutAfterSend,
            Cause::Bug,
            Cause::TimeoutAfterSend,
            Cause::BrokenAfterSend,
            Cause::BadAnswer,
            Cause::NotConfigured,
            Cause::SmtpReply(535),
            Cause::SmtpReply(550),
            Cause::SmtpReply(554),
        ];
        for cause in final_ {
            assert!(!cause.retryable(), "{cause:?} ends the run");
        }
    }

    #[test]
    fn only_a_retryable_cause_keeps_retry_after() {
        let after = Some(Duration::from_secs(7));
        assert_eq!(
            Cause::HttpStatus(429).step_error("busy", after).retry_after,
            after,
            "429 keeps it"
        );
        let fatal = Cause::HttpStatus(404).step_error("gone", after);
        assert!(
            !fatal.retryable && fatal.retry_after.is_none(),
            "a 404 is final and waits for nothing"
        );
    }
}
