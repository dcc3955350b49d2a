//! Any bytes as a webhook body against the orders contract: `extract` answers the values
//! or an error naming the parameter and its path; it never panics.
#![no_main]

use fronta_automation::contract::extract;
use fronta_automation::model::{ParamType, WebhookParam};
use libfuzzer_sys::fuzz_target;

fn param(name: &str, path: &str, param_type: ParamType, required: bool) -> WebhookParam {
    WebhookParam {
        name: name.into(),
        path: path.into(),
        param_type,
        required,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let params = [
        param("orderId", "order.id", ParamType::String, true),
        param("total", "order.total", ParamType::Number, true),
        param("paid", "order.paid", ParamType::Boolean, false),
        param("placed", "order.placedAt", ParamType::Date, false),
        param("lines", "order.lines", ParamType::Array, false),
        param("firstError", "errors.0.message", ParamType::String, false),
        param("customer", "customer", ParamType::Object, false),
    ];
    match extract(&params, &body) {
        Ok(values) => assert_eq!(values.get("_body"), Some(&body), "the whole body is kept"),
        Err(err) => {
            let text = err.to_string();
            assert!(
                params.iter().any(|p| text.contains(&p.name) && text.contains(&p.path)),
                "the error names a parameter and its path: {text}"
            );
        }
    }
});
