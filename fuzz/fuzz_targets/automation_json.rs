//! Any text as an automation document: it parses, or answers problems that each say what
//! is wrong; what parses validates without panicking.
#![no_main]

use fronta_automation::validate::validate;
use fronta_automation::{Automation, ValidationContext};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match Automation::from_json(text) {
        Ok(automation) => {
            let context =
                ValidationContext::with_ticket_types([("order", vec!["waiting-to-pack", "shipped"])]);
            for problem in validate(&automation, &context) {
                assert!(!problem.message.is_empty(), "a validation problem says what: {problem:?}");
            }
        }
        Err(problems) => {
            assert!(!problems.is_empty(), "a refusal lists at least one problem");
            for problem in &problems {
                assert!(!problem.message.is_empty(), "every problem has a message");
            }
        }
    }
});
