//! API tokens: shown once at creation, stored only as a SHA-256 hash. A token is 256
//! random bits from the operating system (64 lowercase hex digits) behind a recognisable
//! prefix, so a leaked one is easy to grep for; the lookup is by hash, so no comparison of
//! secrets happens in our code. [`random_bytes`] is also the source of other secrets
//! (webhook signing keys).

use std::fmt::Write;

use sha2::{Digest, Sha256};

/// The prefix of tenant API tokens.
pub const TENANT_TOKEN_PREFIX: &str = "ft_";

/// A new random token with `prefix`: 32 random bytes as 64 lowercase hex digits.
///
/// # Panics
///
/// As [`random_bytes`], when the operating system has no randomness to give.
pub fn generate(prefix: &str) -> String {
    let mut token = String::with_capacity(prefix.len() + 64);
    token.push_str(prefix);
    for byte in random_bytes::<32>() {
        // Writing to a String cannot fail.
        let _ = write!(token, "{byte:02x}");
    }
    token
}

/// `N` bytes from the operating system's generator (`getrandom`).
///
/// # Panics
///
/// When the operating system has no source of randomness at all (it does not happen on
/// the systems fronta runs on). A secret must never be made from anything weaker, so
/// this stops the program rather than answer (`Uuid::new_v4`, used before, did the same).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if let Err(err) = getrandom::fill(&mut bytes) {
        panic!("the operating system gave no random bytes for a secret: {err}");
    }
    bytes
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
        assert!(
            a[3..]
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "lowercase hex after the prefix: {a}"
        );
        assert_eq!(hash(&a), hash(&a), "hashing is stable");
        assert_ne!(hash(&a), hash(&b), "different tokens, different hashes");
        assert_eq!(hash(&a).len(), 64, "hex sha-256");
        assert!(
            !hash(&a).contains(&a[3..]),
            "the hash does not contain the token"
        );
    }

    #[test]
    fn random_bytes_differ_between_calls_and_use_every_byte() {
        let draws: Vec<[u8; 32]> = (0..16).map(|_| random_bytes::<32>()).collect();
        for (i, a) in draws.iter().enumerate() {
            for b in &draws[i + 1..] {
                assert_ne!(a, b, "two draws of 256 bits never repeat");
            }
        }
        // Over 16 draws of 32 bytes, a byte position that is always zero would mean the
        // buffer was not filled (chance of a false alarm: 16 × 256^-16).
        for position in 0..32 {
            assert!(
                draws.iter().any(|draw| draw[position] != 0),
                "byte {position} is filled"
            );
        }
    }
}
