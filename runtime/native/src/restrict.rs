//! `--grpc-restricted-protocol`: a method in a restricted category answers UNAVAILABLE unless the call
//! carries the category's metadata header with exactly the configured value. Checked on the headers, before
//! the body is read or decoded; the value is compared in constant time.

use std::collections::HashMap;

/// What one restricted method requires.
#[derive(Clone, Debug)]
pub struct Rule {
    pub header: String,
    pub value: Vec<u8>,
    pub refusal: String,
}

/// Method path (`/package.Service/Method`) -> its rule; methods absent are open.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    rules: HashMap<String, Rule>,
}

impl Restrictions {
    pub fn new(rules: HashMap<String, Rule>) -> Self {
        Self { rules }
    }

    /// `None` when the call may go on, else the refusal message. `header` looks a header up by name.
    pub fn refusal<'a, F>(&self, path: &str, header: F) -> Option<&str>
    where
        F: FnOnce(&str) -> Option<&'a [u8]>,
    {
        let rule = self.rules.get(path)?;
        match header(&rule.header) {
            Some(presented) if constant_time_eq(presented, &rule.value) => None,
            _ => Some(&rule.refusal),
        }
    }
}

/// Equality whose time depends on the lengths only, not on where the contents differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restrictions() -> Restrictions {
        let rule = Rule {
            header: "triton-grpc-protocol-key".into(),
            value: b"secret".to_vec(),
            refusal: "This protocol is restricted, expecting header 'triton-grpc-protocol-key'"
                .into(),
        };
        Restrictions::new(HashMap::from([(
            "/inference.GRPCInferenceService/ModelInfer".to_string(),
            rule,
        )]))
    }

    #[test]
    fn open_methods_pass_without_the_header() {
        assert_eq!(
            restrictions().refusal("/inference.GRPCInferenceService/ServerLive", |_| None),
            None
        );
    }

    #[test]
    fn restricted_methods_need_the_exact_value() {
        let r = restrictions();
        let path = "/inference.GRPCInferenceService/ModelInfer";
        assert!(r
            .refusal(path, |_| None)
            .unwrap()
            .contains("triton-grpc-protocol-key"));
        assert!(r.refusal(path, |_| Some(b"secreT")).is_some());
        assert!(r.refusal(path, |_| Some(b"secret2")).is_some());
        assert_eq!(
            r.refusal(path, |name| (name == "triton-grpc-protocol-key")
                .then_some(&b"secret"[..])),
            None
        );
    }

    #[test]
    fn constant_time_eq_compares_contents_and_length() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
