//! The SSRF guard: which addresses a connector may reach. Automations are written by
//! tenants, so a URL in a step is untrusted: without a guard, `http://169.254.169.254/`
//! reads the cloud's metadata (credentials) and `http://127.0.0.1:5432/` probes our own
//! services.
//!
//! Three checks, because each path to an address bypasses the others:
//! 1. [`AddressPolicy::check_url`] before every request **and every redirect hop**: only
//!    `http`/`https`; a literal IP host (which never reaches a resolver) is checked as an
//!    address; `localhost`-style and metadata names are refused by name. The URL parser
//!    has already turned `2130706433`, `0x7f.1`, `0177.0.0.1` and `127.1` into
//!    `127.0.0.1`, so every spelling of an address is checked as that address.
//! 2. [`GuardedResolver`] resolves a name, refuses the whole answer when any address in it
//!    is forbidden (a mixed answer is how DNS rebinding picks its moment), and hands the
//!    connection exactly the addresses it checked — the connection is pinned to them; no
//!    second lookup happens between check and connect.
//! 3. The client has no proxy (a proxy would resolve names where we cannot check them).
//!
//! Forbidden ([`forbidden_reason`], a pure function): loopback, private (RFC 1918),
//! carrier-grade NAT (100.64.0.0/10), link-local (and the metadata address in it),
//! "this network" 0.0.0.0/8, broadcast, multicast, documentation, benchmarking and
//! reserved ranges, IETF protocol assignments; IPv6 unspecified, loopback, unique-local
//! (fc00::/7), link-local (fe80::/10), site-local, multicast, discard, Teredo and the
//! other 2001::/23 assignments, IPv4-compatible forms, and the IPv4 inside IPv4-mapped
//! (`::ffff:a.b.c.d`), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses is checked as
//! IPv4. Plus the known public metadata address 168.63.129.16.
//!
//! The [`AllowList`] is the operator's explicit exception for self-hosted services: a
//! host name on it may resolve anywhere, an address inside one of its networks may be
//! reached. It is empty by default.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use url::{Host, Url};

/// Why an address, a name or a URL was refused (found in a client error's source chain
/// to tell a refusal from a connection error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why `ip` must not be reached, or `None` when it may be.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const RANGES: &[([u8; 4], u32, &str)] = &[
        ([169, 254, 169, 254], 32, "the cloud metadata address"),
        (
            [168, 63, 129, 16],
            32,
            "a cloud metadata address (168.63.129.16)",
        ),
        ([0, 0, 0, 0], 8, "\"this network\" (0.0.0.0/8)"),
        ([10, 0, 0, 0], 8, "a private address (10.0.0.0/8)"),
        (
            [100, 64, 0, 0],
            10,
            "a carrier-grade NAT address (100.64.0.0/10)",
        ),
        ([127, 0, 0, 0], 8, "a loopback address (127.0.0.0/8)"),
        (
            [169, 254, 0, 0],
            16,
            "a link-local address (169.254.0.0/16)",
        ),
        ([172, 16, 0, 0], 12, "a private address (172.16.0.0/12)"),
        (
            [192, 0, 0, 0],
            24,
            "an IETF protocol address (192.0.0.0/24)",
        ),
        ([192, 0, 2, 0], 24, "a documentation address (192.0.2.0/24)"),
        (
            [192, 88, 99, 0],
            24,
            "a 6to4 relay address (192.88.99.0/24)",
        ),
        ([192, 168, 0, 0], 16, "a private address (192.168.0.0/16)"),
        (
            [198, 18, 0, 0],
            15,
            "a benchmarking address (198.18.0.0/15)",
        ),
        (
            [198, 51, 100, 0],
            24,
            "a documentation address (198.51.100.0/24)",
        ),
        (
            [203, 0, 113, 0],
            24,
            "a documentation address (203.0.113.0/24)",
        ),
        ([224, 0, 0, 0], 4, "a multicast address (224.0.0.0/4)"),
        ([255, 255, 255, 255], 32, "the broadcast address"),
        ([240, 0, 0, 0], 4, "a reserved address (240.0.0.0/4)"),
    ];
    RANGES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    if ip.is_unspecified() {
        return Some("the unspecified address (::)");
    }
    if ip.is_loopback() {
        return Some("the loopback address (::1)");
    }
    // The IPv4 inside the forms that reach an IPv4 host is judged as that IPv4.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4).map(|_| "an IPv4-mapped IPv6 address of a forbidden IPv4 address");
    }
    let low32 = Ipv4Addr::from((bits & 0xFFFF_FFFF) as u32);
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return forbidden_v4(low32)
            .map(|_| "a NAT64 address (64:ff9b::/96) of a forbidden IPv4 address");
    }
    if in_v6(ip, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let embedded = Ipv4Addr::from(((bits >> 80) & 0xFFFF_FFFF) as u32);
        return forbidden_v4(embedded)
            .map(|_| "a 6to4 address (2002::/16) of a forbidden IPv4 address");
    }
    const RANGES: &[(Ipv6Addr, u32, &str)] = &[
        (
            Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
            96,
            "an IPv4-compatible IPv6 address (::/96, deprecated)",
        ),
        (
            Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
            48,
            "a local-use NAT64 address (64:ff9b:1::/48)",
        ),
        (
            Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
            64,
            "a discard-only address (100::/64)",
        ),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
            32,
            "a documentation address (2001:db8::/32)",
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            23,
            "an IETF protocol address (2001::/23: Teredo, ORCHID, benchmarking)",
        ),
        (
            Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
            20,
            "a documentation address (3fff::/20)",
        ),
        (
            Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
            7,
            "a unique-local address (fc00::/7)",
        ),
        (
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
            10,
            "a link-local address (fe80::/10)",
        ),
        (
            Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
            10,
            "a site-local address (fec0::/10, deprecated)",
        ),
        (
            Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
            8,
            "a multicast address (ff00::/8)",
        ),
    ];
    RANGES
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

/// A host name as compared: lower case, without the root's trailing dot.
pub fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Why a host *name* is refused before any lookup, or `None`.
pub fn forbidden_name(host: &str) -> Option<&'static str> {
    let host = normalize_host(host);
    if host.is_empty() {
        return Some("an empty host name");
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("a localhost name");
    }
    const METADATA: [&str; 3] = ["metadata.google.internal", "metadata.goog", "metadata"];
    if METADATA.contains(&host.as_str()) {
        return Some("a cloud metadata name");
    }
    None
}

/// A network in CIDR form (`10.0.0.0/8`, `fd00::/8`; a bare address is one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    pub address: IpAddr,
    pub prefix: u32,
}

impl Network {
    pub fn parse(text: &str) -> Result<Network, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{text:?} is not an address or a network"))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .parse::<u32>()
                .ok()
                .filter(|prefix| *prefix <= max)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {max}"))?,
        };
        Ok(Network { address, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => in_v4(ip, net.octets(), self.prefix),
            (IpAddr::V6(net), IpAddr::V6(ip)) => in_v6(ip, net, self.prefix),
            (IpAddr::V4(_), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|v4| self.contains(IpAddr::V4(v4))),
            (IpAddr::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

/// The operator's exceptions: host names (exact, case-insensitive) and networks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    hosts: Vec<String>,
    networks: Vec<Network>,
}

impl AllowList {
    /// Reads a comma- or space-separated list: each entry a network (`10.1.0.0/16`), an
    /// address (`192.168.1.5`, `[fd00::1]`) or a host name (`jira.internal`).
    pub fn parse(text: &str) -> Result<AllowList, String> {
        let mut list = AllowList::default();
        for entry in text
            .split([',', ' ', '\n', '\t'])
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
        {
            let looks_like_address =
                entry.contains('/') || entry.contains(':') || entry.parse::<Ipv4Addr>().is_ok();
            if looks_like_address {
                list.networks.push(Network::parse(entry)?);
            } else if entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
            {
                list.hosts.push(normalize_host(entry));
            } else {
                return Err(format!(
                    "{entry:?} is not a host name, an address or a network"
                ));
            }
        }
        Ok(list)
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.networks.is_empty()
    }

    pub fn allows_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.hosts.contains(&host)
    }

    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        self.networks.iter().any(|network| network.contains(ip))
    }

    /// Entries, for the start-up log line.
    pub fn describe(&self) -> String {
        let mut entries: Vec<String> = self.hosts.clone();
        entries.extend(
            self.networks
                .iter()
                .map(|network| format!("{}/{}", network.address, network.prefix)),
        );
        entries.join(", ")
    }
}

/// What connectors may reach: everything but the forbidden addresses, plus the allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    pub allow: AllowList,
}

impl AddressPolicy {
    pub fn new(allow: AllowList) -> Self {
        Self { allow }
    }

    /// An address: allowed by the list, else refused when forbidden.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow.allows_ip(ip) {
            return Ok(());
        }
        match forbidden_reason(ip) {
            Some(reason) => Err(Refused(format!(
                "the address {ip} is {reason}; connectors may not reach it (FRONTA_HTTP_ALLOW lists exceptions)"
            ))),
            None => Ok(()),
        }
    }

    /// A URL before it is requested (the first and every redirect hop).
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused(format!(
                "only http and https URLs can be requested, not {}:",
                url.scheme()
            )));
        }
        match url.host() {
            None => Err(Refused("the URL has no host".into())),
            Some(Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip)),
            Some(Host::Domain(name)) => self.check_name(name),
        }
    }

    /// A host name before it is looked up.
    pub fn check_name(&self, name: &str) -> Result<(), Refused> {
        if self.allow.allows_host(name) {
            return Ok(());
        }
        match forbidden_name(name) {
            Some(reason) => Err(Refused(format!(
                "the host {name:?} is {reason}; connectors may not reach it (FRONTA_HTTP_ALLOW lists exceptions)"
            ))),
            None => Ok(()),
        }
    }

    /// The answer of a lookup of `name`: every address must pass (or the name be allowed).
    pub fn check_resolved(&self, name: &str, addresses: &[IpAddr]) -> Result<(), Refused> {
        if self.allow.allows_host(name) {
            return Ok(());
        }
        if addresses.is_empty() {
            return Err(Refused(format!("the host {name:?} has no address")));
        }
        for ip in addresses {
            if let Err(Refused(reason)) = self.check_ip(*ip) {
                return Err(Refused(format!(
                    "the host {name:?} resolves to {ip}: {reason}"
                )));
            }
        }
        Ok(())
    }
}

/// Why a host gave no address a connection may use.
#[derive(Debug)]
pub enum HostFailure {
    /// The policy refuses the host, or an address it resolves to.
    Refused(Refused),
    /// The name could not be looked up (retryable: a resolver has bad minutes).
    Lookup(std::io::Error),
}

impl AddressPolicy {
    /// A host (a bare name or address, IPv6 with or without brackets) as far as it can be
    /// judged without a lookup: a literal address as that address, a name by
    /// [`AddressPolicy::check_name`]. What a save can know; the addresses a name resolves
    /// to are judged by [`AddressPolicy::checked_addresses`] when a connection is made.
    pub fn check_host(&self, host: &str) -> Result<(), Refused> {
        let host = host.trim();
        match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => self.check_ip(ip),
            Err(_) => self.check_name(host),
        }
    }

    /// The addresses a connection to `host` may use, for connectors that dial themselves
    /// (IMAP, SMTP): a literal address checked as itself; a name checked, looked up once,
    /// and every address of the answer checked (a mixed answer is refused whole). The
    /// caller connects to exactly these, never to the name, so nothing is looked up
    /// between the check and the connection.
    pub async fn checked_addresses(
        &self,
        lookup: &dyn NameLookup,
        host: &str,
    ) -> Result<Vec<IpAddr>, HostFailure> {
        let host = host.trim();
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            self.check_ip(ip).map_err(HostFailure::Refused)?;
            return Ok(vec![ip]);
        }
        self.check_name(host).map_err(HostFailure::Refused)?;
        let found = lookup.lookup(host).await.map_err(HostFailure::Lookup)?;
        self.check_resolved(host, &found)
            .map_err(HostFailure::Refused)?;
        tracing::debug!(host = %host, addresses = ?found, "SSRF guard: resolved and checked");
        Ok(found)
    }
}

/// The policy as the automation runtime's port: how the server judges a saved host.
impl fronta_automation::connector::HostPolicy for AddressPolicy {
    fn host_refused(&self, host: &str) -> Option<String> {
        self.check_host(host).err().map(|refused| refused.0)
    }
}

/// Looks host names up (the system's resolver, or a fixed table in tests).
#[async_trait]
pub trait NameLookup: Send + Sync + 'static {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The system's resolver (`getaddrinfo` on a blocking thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

#[async_trait]
impl NameLookup for SystemLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let found = tokio::net::lookup_host((host, 0u16)).await?;
        Ok(found.map(|address| address.ip()).collect())
    }
}

/// A fixed table of names (normalized) to addresses; other names do not exist.
#[derive(Debug, Clone, Default)]
pub struct FixedLookup {
    names: HashMap<String, Vec<IpAddr>>,
}

impl FixedLookup {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, name: &str, addresses: &[IpAddr]) -> Self {
        self.names.insert(normalize_host(name), addresses.to_vec());
        self
    }
}

#[async_trait]
impl NameLookup for FixedLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        self.names
            .get(&normalize_host(host))
            .cloned()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no such host {host:?}"),
                )
            })
    }
}

/// The client's resolver: looks the name up, checks every answer, and answers only the
/// checked addresses (the connection uses exactly those).
pub struct GuardedResolver {
    pub policy: Arc<AddressPolicy>,
    pub lookup: Arc<dyn NameLookup>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let lookup = self.lookup.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if let Err(refused) = policy.check_name(&host) {
                tracing::warn!(host = %host, reason = %refused, "SSRF guard: name refused");
                return Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            let addresses = lookup.lookup(&host).await?;
            if let Err(refused) = policy.check_resolved(&host, &addresses) {
                tracing::warn!(host = %host, reason = %refused, "SSRF guard: resolved address refused");
                return Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            tracing::debug!(host = %host, addresses = ?addresses, "SSRF guard: resolved and checked");
            let checked: reqwest::dns::Addrs =
                Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(checked)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_judged_without_a_lookup_as_far_as_it_can_be() {
        let strict = AddressPolicy::default();
        assert!(strict.check_host("10.0.0.5").is_err(), "a private literal");
        assert!(
            strict.check_host("[::1]").is_err(),
            "a bracketed IPv6 literal"
        );
        assert!(strict.check_host("localhost").is_err(), "a localhost name");
        assert!(
            strict.check_host(" smtp.example.com ").is_ok(),
            "a public name"
        );
        let allowed =
            AddressPolicy::new(AllowList::parse("127.0.0.1, relay.internal").expect("a list"));
        assert!(
            allowed.check_host("127.0.0.1").is_ok(),
            "an allowed address"
        );
        use fronta_automation::connector::HostPolicy;
        assert_eq!(
            allowed.host_refused("relay.internal"),
            None,
            "an allowed name"
        );
        assert!(
            strict
                .host_refused("169.254.169.254")
                .is_some_and(|why| why.contains("FRONTA_HTTP_ALLOW")),
            "the refusal says how an operator allows a host"
        );
    }

    #[tokio::test]
    async fn checked_addresses_are_the_looked_up_ones_each_checked() {
        let private: IpAddr = "10.1.2.3".parse().expect("ip");
        let public: IpAddr = "93.184.216.34".parse().expect("ip");
        let lookup = FixedLookup::new()
            .with("mail.example.com", &[public])
            .with("mixed.example.com", &[public, private])
            .with("relay.internal", &[private]);
        let strict = AddressPolicy::default();
        assert_eq!(
            strict
                .checked_addresses(&lookup, "mail.example.com")
                .await
                .expect("public"),
            vec![public]
        );
        assert!(
            matches!(
                strict.checked_addresses(&lookup, "mixed.example.com").await,
                Err(HostFailure::Refused(_))
            ),
            "one forbidden address refuses the whole answer"
        );
        assert!(
            matches!(
                strict
                    .checked_addresses(&lookup, "nowhere.example.com")
                    .await,
                Err(HostFailure::Lookup(_))
            ),
            "a failed lookup is not a refusal"
        );
        assert!(
            matches!(
                strict.checked_addresses(&lookup, "10.0.0.1").await,
                Err(HostFailure::Refused(_))
            ),
            "a literal is checked without a lookup"
        );
        let allowed = AddressPolicy::new(AllowList::parse("relay.internal").expect("a list"));
        assert_eq!(
            allowed
                .checked_addresses(&lookup, "relay.internal")
                .await
                .expect("allowed by name"),
            vec![private]
        );
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            let ip: IpAddr = ip.parse().expect("an address");
            assert_eq!(forbidden_reason(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn networks_contain_what_their_prefix_says() {
        let net = Network::parse("10.1.0.0/16").expect("a network");
        assert!(net.contains("10.1.200.3".parse().expect("ip")), "inside");
        assert!(!net.contains("10.2.0.1".parse().expect("ip")), "outside");
        assert!(
            Network::parse("127.0.0.1")
                .expect("an address")
                .contains("::ffff:127.0.0.1".parse().expect("ip")),
            "a mapped address is its IPv4"
        );
        assert!(Network::parse("10.0.0.0/33").is_err(), "prefix too long");
    }

    #[test]
    fn allow_list_reads_hosts_addresses_and_networks() {
        let list =
            AllowList::parse("jira.internal, 10.1.0.0/16 [fd00::1] 192.168.1.5").expect("parses");
        assert!(
            list.allows_host("JIRA.internal."),
            "hosts compare normalized"
        );
        assert!(list.allows_ip("10.1.2.3".parse().expect("ip")), "a network");
        assert!(
            list.allows_ip("fd00::1".parse().expect("ip")),
            "an IPv6 address"
        );
        assert!(
            list.allows_ip("192.168.1.5".parse().expect("ip")),
            "an IPv4 address"
        );
        assert!(
            !list.allows_ip("192.168.1.6".parse().expect("ip")),
            "only that address"
        );
        assert!(
            AllowList::parse("http://x").is_err(),
            "a URL is not an entry"
        );
    }
}
