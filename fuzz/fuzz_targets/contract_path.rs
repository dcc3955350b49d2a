//! Any text as a contract path: judged by `path_problem`; an accepted path reads the value
//! its own example body holds (long numeric segments aside, as in the property test).
#![no_main]

use fronta_automation::contract::{example_body, extract, path_problem};
use fronta_automation::model::{ParamType, WebhookParam};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match path_problem(text) {
        Some(problem) => assert!(!problem.is_empty(), "a problem says what is wrong"),
        None => {
            let params = vec![WebhookParam {
                name: "x".into(),
                path: text.to_owned(),
                param_type: ParamType::String,
                required: true,
            }];
            let example = example_body(&params);
            let indexed = text
                .split('.')
                .any(|s| s.parse::<usize>().is_ok_and(|n| n > 20));
            if !indexed {
                assert!(
                    extract(&params, &example).is_ok(),
                    "the example body of {text:?} satisfies it: {example}"
                );
            }
        }
    }
});
