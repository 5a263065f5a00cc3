//! The client behind a trusted proxy (`--trusted-proxy`). A door reached
//! off the host sits behind a TLS terminator, so every client arrives from
//! its address and would share one caller's share of the instances. On a
//! connection from a trusted proxy, the client is the address the proxies
//! recorded in `Forwarded` (RFC 7239) or, without it, `X-Forwarded-For`:
//! read from the right, past every trusted hop, the first address that is
//! not one. What a client wrote there itself sits further left and is never
//! reached. From anyone else the headers are ignored.

use std::net::IpAddr;
use std::str::FromStr;

use hyper::HeaderMap;
use ipnet::IpNet;

/// The proxies whose forwarding headers are believed.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Vec<IpNet>);

/// One `--trusted-proxy`: an address, or a network in CIDR notation.
pub fn parse(value: &str) -> Result<IpNet, String> {
    IpNet::from_str(value)
        .or_else(|_| IpAddr::from_str(value).map(IpNet::from))
        .map_err(|_| format!("{value:?} is neither an address nor a CIDR network"))
}

impl TrustedProxies {
    /// Believes the forwarding headers of a request from any of `proxies`.
    pub fn new(proxies: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies(proxies)
    }

    fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|net| net.contains(&address))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.0.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let forwarded: Vec<&str> = headers
            .get_all("forwarded")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let hops: Vec<Option<IpAddr>> = if forwarded.is_empty() {
            headers
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|hop| address(hop.trim()))
                .collect()
        } else {
            forwarded
                .iter()
                .flat_map(|v| v.split(','))
                .map(|element| {
                    element
                        .split(';')
                        .filter_map(|pair| pair.trim().split_once('='))
                        .find(|(name, _)| name.eq_ignore_ascii_case("for"))
                        .and_then(|(_, value)| address(value.trim().trim_matches('"')))
                })
                .collect()
        };
        let mut client = peer;
        for hop in hops.into_iter().rev() {
            // A hop that names no address ends the walk at the proxy that
            // handed it over.
            let Some(hop) = hop else { break };
            client = hop;
            if !self.trusts(hop) {
                break;
            }
        }
        client
    }
}

/// An address as a forwarding header writes it: bare, `[v6]`, or either
/// with a port.
fn address(value: &str) -> Option<IpAddr> {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    value.parse().ok().or_else(|| {
        let (host, port) = value.rsplit_once(':')?;
        port.parse::<u16>().ok()?;
        host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(trusted: &[&str], peer: &str, headers: &[(&str, &str)]) -> String {
        let proxies = TrustedProxies::new(trusted.iter().map(|t| parse(t).unwrap()).collect());
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        proxies.client(peer.parse().unwrap(), &map).to_string()
    }

    #[test]
    fn only_a_trusted_peers_headers_are_read() {
        let xff = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client(&[], "10.0.0.1", &xff), "10.0.0.1");
        assert_eq!(client(&["10.0.0.0/8"], "192.0.2.1", &xff), "192.0.2.1");
        assert_eq!(client(&["10.0.0.0/8"], "10.0.0.1", &xff), "203.0.113.7");
        assert_eq!(client(&["10.0.0.1"], "10.0.0.1", &[]), "10.0.0.1");
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let trusted = ["10.0.0.0/8"];
        // The client forged the leftmost entry; the proxy appended its peer.
        let chain = [("x-forwarded-for", "198.51.100.9, 203.0.113.7, 10.0.0.2")];
        assert_eq!(client(&trusted, "10.0.0.1", &chain), "203.0.113.7");
        let lines = [
            ("x-forwarded-for", "198.51.100.9"),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        assert_eq!(client(&trusted, "10.0.0.1", &lines), "203.0.113.7");
        // A hop that is not an address ends the walk at the proxy.
        let garbled = [("x-forwarded-for", "203.0.113.7, nonsense")];
        assert_eq!(client(&trusted, "10.0.0.1", &garbled), "10.0.0.1");
        // Every hop trusted: the leftmost.
        let inside = [("x-forwarded-for", "10.1.1.1, 10.0.0.2")];
        assert_eq!(client(&trusted, "10.0.0.1", &inside), "10.1.1.1");
    }

    #[test]
    fn forwarded_is_read_before_x_forwarded_for() {
        let trusted = ["10.0.0.0/8", "::1"];
        let both = [
            (
                "forwarded",
                r#"for=198.51.100.9;proto=https, for="[2001:db8::17]:4711""#,
            ),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        assert_eq!(client(&trusted, "10.0.0.1", &both), "2001:db8::17");
        let ported = [("forwarded", "for=\"203.0.113.7:8080\";by=10.0.0.1")];
        assert_eq!(client(&trusted, "::1", &ported), "203.0.113.7");
        let hidden = [("forwarded", "for=_hidden")];
        assert_eq!(client(&trusted, "10.0.0.1", &hidden), "10.0.0.1");
    }

    #[test]
    fn a_proxy_is_an_address_or_a_network() {
        assert_eq!(parse("10.0.0.1").unwrap().to_string(), "10.0.0.1/32");
        assert_eq!(parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse("::1").unwrap().to_string(), "::1/128");
        assert_eq!(
            parse("proxy").unwrap_err(),
            r#""proxy" is neither an address nor a CIDR network"#
        );
    }
}
