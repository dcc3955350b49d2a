//! Any text as a template: it parses, or the error says it is about a template; a parsed
//! template renders when every name it uses is present; literal text renders as itself.
#![no_main]

use fronta_automation::template::{self, parse, render_str};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fuzz_target!(|text: &str| {
    match parse(text) {
        Ok(_) => {
            let mut scope = Map::new();
            for name in template::names_in(&Value::String(text.to_owned())) {
                scope.insert(name, json!({"a": [1, "two", null], "b": 3.5}));
            }
            let rendered = render_str(text, &scope);
            assert!(rendered.is_ok(), "{text:?} with every name present renders: {rendered:?}");
            if !text.contains("{{") {
                assert_eq!(rendered.ok(), Some(Value::String(text.to_owned())));
            }
            if let Err(err) = render_str(text, &Map::new()) {
                assert!(!err.to_string().is_empty(), "a missing name is named");
            }
        }
        Err(err) => {
            let message = err.to_string();
            assert!(message.contains("template"), "{message}");
            assert!(render_str(text, &Map::new()).is_err());
        }
    }
});
