//! API tokens: shown once at creation, stored only as a SHA-256 hash. A token is 244
//! random bits (two v4 UUIDs) behind a recognisable prefix, so a leaked one is easy to
//! grep for; the lookup is by hash, so no comparison of secrets happens in our code.

use sha2::{Digest, Sha256};

/// The prefix of tenant API tokens.
pub const TENANT_TOKEN_PREFIX: &str = "ft_";

/// A new random token with `prefix`.
pub fn generate(prefix: &str) -> String {
    format!(
        "{prefix}{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The stored form of a token: lowercase hex SHA-256.
pub fn hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_prefixed_and_hashed_stably() {
        let (a, b) = (generate(TENANT_TOKEN_PREFIX), generate(TENANT_TOKEN_PREFIX));
        assert_ne!(a, b, "two tokens differ");
        assert!(
            a.starts_with("ft_") && a.len() == 3 + 64,
            "shape of a token: {a}"
        );
        assert_eq!(hash(&a), hash(&a), "hashing is stable");
        assert_ne!(hash(&a), hash(&b), "different tokens, different hashes");
        assert_eq!(hash(&a).len(), 64, "hex sha-256");
        assert!(
            !hash(&a).contains(&a[3..]),
            "the hash does not contain the token"
        );
    }
}
