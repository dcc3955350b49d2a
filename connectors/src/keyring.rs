//! The cipher of per-tenant secrets at rest: XChaCha20-Poly1305 with a 256-bit key from
//! configuration and a random 192-bit nonce per value (random nonces of that size never
//! realistically repeat, so no counter has to be kept across processes).
//!
//! Each value is bound to where it belongs: the associated data is the key version, the
//! tenant and the secret's name, so a row copied to another tenant or name does not open.
//!
//! Rotation: the current key (`FRONTA_SECRET_KEY`, version `FRONTA_SECRET_KEY_VERSION`,
//! default 1) seals every new value; older keys (`FRONTA_SECRET_OLD_KEYS`,
//! `version:base64,…`) still open the values sealed with them until each is written again.
//!
//! Keys never reach a log line or an error message; `Debug` shows versions only.

use std::collections::BTreeMap;

use base64::Engine;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use fronta_automation::secrets::{SealedSecret, SecretCipher, SecretError};
use fronta_desk::TenantId;

/// The environment variable of the current key (base64 of 32 bytes).
pub const KEY_VAR: &str = "FRONTA_SECRET_KEY";
/// The environment variable of the current key's version (a number ≥ 1; default 1).
pub const KEY_VERSION_VAR: &str = "FRONTA_SECRET_KEY_VERSION";
/// The environment variable of the older keys: `version:base64,version:base64`.
pub const OLD_KEYS_VAR: &str = "FRONTA_SECRET_OLD_KEYS";
/// Key length in bytes.
pub const KEY_BYTES: usize = 32;

/// Why the key configuration cannot be used. Never holds key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("{0}: not base64 of exactly {KEY_BYTES} bytes")]
    BadKey(String),
    #[error("{0}: a key version is a whole number from 1")]
    BadVersion(String),
    #[error("{OLD_KEYS_VAR}: entries are version:base64, separated by commas")]
    BadOldKeys,
    #[error("key version {0} is given twice")]
    DuplicateVersion(u32),
}

/// The configured keys.
pub struct Keyring {
    current: u32,
    keys: BTreeMap<u32, XChaCha20Poly1305>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current)
            .field("versions", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn decode_key(what: &str, text: &str) -> Result<XChaCha20Poly1305, KeyringError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| KeyringError::BadKey(what.to_owned()))?;
    let bytes: [u8; KEY_BYTES] = bytes
        .try_into()
        .map_err(|_| KeyringError::BadKey(what.to_owned()))?;
    Ok(XChaCha20Poly1305::new(&Key::from(bytes)))
}

fn parse_version(what: &str, text: &str) -> Result<u32, KeyringError> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|version| *version >= 1)
        .ok_or_else(|| KeyringError::BadVersion(what.to_owned()))
}

fn associated_data(version: u32, tenant: TenantId, name: &str) -> Vec<u8> {
    format!("fronta-secret/v{version}/{tenant}/{name}").into_bytes()
}

impl Keyring {
    /// A keyring with one key (32 raw bytes) as version `version`.
    pub fn new(version: u32, key: [u8; KEY_BYTES]) -> Self {
        let mut keys = BTreeMap::new();
        keys.insert(version, XChaCha20Poly1305::new(&Key::from(key)));
        Self {
            current: version,
            keys,
        }
    }

    /// Adds an older key that opens values sealed with `version`.
    pub fn with_old(mut self, version: u32, key: [u8; KEY_BYTES]) -> Result<Self, KeyringError> {
        if self.keys.contains_key(&version) {
            return Err(KeyringError::DuplicateVersion(version));
        }
        self.keys
            .insert(version, XChaCha20Poly1305::new(&Key::from(key)));
        Ok(self)
    }

    /// The keyring the three settings describe (`key` base64; `version` default 1; `old`
    /// `version:base64,…`). The binary reads them as `FRONTA_SECRET_KEY`,
    /// `FRONTA_SECRET_KEY_VERSION` and `FRONTA_SECRET_OLD_KEYS` (or their flags).
    pub fn from_config(
        key: &str,
        version: Option<&str>,
        old: Option<&str>,
    ) -> Result<Self, KeyringError> {
        let current = match version {
            Some(text) if !text.trim().is_empty() => parse_version(KEY_VERSION_VAR, text)?,
            _ => 1,
        };
        let mut keys = BTreeMap::new();
        keys.insert(current, decode_key(KEY_VAR, key)?);
        for entry in old
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
        {
            let (version, key) = entry.split_once(':').ok_or(KeyringError::BadOldKeys)?;
            let version = parse_version(OLD_KEYS_VAR, version)?;
            if keys.contains_key(&version) {
                return Err(KeyringError::DuplicateVersion(version));
            }
            keys.insert(version, decode_key(OLD_KEYS_VAR, key)?);
        }
        Ok(Self { current, keys })
    }

    /// The versions configured (the current one included), for the start-up log line.
    pub fn versions(&self) -> Vec<u32> {
        self.keys.keys().copied().collect()
    }
}

impl SecretCipher for Keyring {
    fn seal(&self, tenant: TenantId, name: &str, value: &str) -> Result<SealedSecret, SecretError> {
        let cipher = self
            .keys
            .get(&self.current)
            .ok_or(SecretError::UnknownKeyVersion(self.current))?;
        let nonce = XNonce::try_generate().map_err(|_| SecretError::Unreadable(self.current))?;
        let aad = associated_data(self.current, tenant, name);
        let ciphertext = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Unreadable(self.current))?;
        Ok(SealedSecret {
            key_version: self.current,
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    fn open(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &SealedSecret,
    ) -> Result<String, SecretError> {
        let version = sealed.key_version;
        let cipher = self
            .keys
            .get(&version)
            .ok_or(SecretError::UnknownKeyVersion(version))?;
        let nonce = XNonce::try_from(sealed.nonce.as_slice())
            .map_err(|_| SecretError::Unreadable(version))?;
        let aad = associated_data(version, tenant, name);
        let plain = cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Unreadable(version))?;
        String::from_utf8(plain).map_err(|_| SecretError::Unreadable(version))
    }

    fn current_version(&self) -> u32 {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> TenantId {
        TenantId::new()
    }

    #[test]
    fn a_sealed_value_opens_only_for_its_tenant_and_name() {
        let keyring = Keyring::new(1, [7; KEY_BYTES]);
        let (a, b) = (tenant(), tenant());
        let sealed = keyring.seal(a, "token", "s3cr3t").expect("seals");
        assert_eq!(sealed.key_version, 1, "sealed with the current version");
        assert!(
            !sealed.ciphertext.windows(6).any(|w| w == b"s3cr3t"),
            "the value is not in the ciphertext"
        );
        assert_eq!(
            keyring.open(a, "token", &sealed).as_deref(),
            Ok("s3cr3t"),
            "opens"
        );
        assert_eq!(
            keyring.open(b, "token", &sealed),
            Err(SecretError::Unreadable(1)),
            "another tenant"
        );
        assert_eq!(
            keyring.open(a, "other", &sealed),
            Err(SecretError::Unreadable(1)),
            "another name"
        );
        let again = keyring.seal(a, "token", "s3cr3t").expect("seals");
        assert_ne!(again.nonce, sealed.nonce, "a fresh nonce each time");
    }

    #[test]
    fn rotation_keeps_old_values_readable_and_seals_with_the_new_key() {
        let old = Keyring::new(1, [1; KEY_BYTES]);
        let t = tenant();
        let sealed_old = old.seal(t, "token", "before").expect("seals");
        let rotated = Keyring::new(2, [2; KEY_BYTES])
            .with_old(1, [1; KEY_BYTES])
            .expect("two versions");
        assert_eq!(
            rotated.open(t, "token", &sealed_old).as_deref(),
            Ok("before"),
            "version 1 still opens"
        );
        assert_eq!(
            rotated
                .seal(t, "token", "after")
                .expect("seals")
                .key_version,
            2,
            "new values use version 2"
        );
        let without_old = Keyring::new(2, [2; KEY_BYTES]);
        assert_eq!(
            without_old.open(t, "token", &sealed_old),
            Err(SecretError::UnknownKeyVersion(1)),
            "a version no longer configured says so"
        );
    }

    #[test]
    fn configuration_is_checked_and_never_echoed() {
        let key = base64::engine::general_purpose::STANDARD.encode([9u8; KEY_BYTES]);
        let keyring = Keyring::from_config(&key, Some("3"), Some(&format!("1:{key}, 2:{key}")))
            .expect("valid configuration");
        assert_eq!(keyring.versions(), vec![1, 2, 3], "three versions");
        assert_eq!(keyring.current_version(), 3, "the current one");
        let short = base64::engine::general_purpose::STANDARD.encode([9u8; 16]);
        let err = Keyring::from_config(&short, None, None).expect_err("16 bytes is too short");
        assert!(
            !err.to_string().contains(&short),
            "the key is not in the message: {err}"
        );
        assert_eq!(
            Keyring::from_config(&key, Some("0"), None).err(),
            Some(KeyringError::BadVersion(KEY_VERSION_VAR.into())),
            "version 0"
        );
        assert_eq!(
            Keyring::from_config(&key, None, Some(&format!("1:{key}"))).err(),
            Some(KeyringError::DuplicateVersion(1)),
            "1 twice"
        );
        assert!(
            !format!("{keyring:?}").contains(&key),
            "Debug shows versions only"
        );
    }
}
