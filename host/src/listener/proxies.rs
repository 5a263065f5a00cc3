//! The client behind a trusted proxy (`--trusted-proxy`). A door reached
//! off the host sits behind a TLS terminator, so every client arrives from
//! its address and would share one caller's share of the instances. On a
//! connection from a trusted proxy, the client is the address the proxies
//! recorded in the one header the operator names (`--client-address-header`:
//! `X-Forwarded-For` by default, or `Forwarded`, RFC 7239): read from the
//! right, past every trusted hop, the first address that is not one. What a
//! client wrote there itself sits further left and is never reached. The
//! other header is never read: a proxy passes through what it does not set,
//! so a client could write it whole. From anyone else no header is read.

use std::net::IpAddr;
use std::str::FromStr;

use hyper::HeaderMap;
use ipnet::IpNet;

/// The proxies whose forwarding header is believed, and which header that is.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies {
    proxies: Vec<IpNet>,
    header: ClientHeader,
}

/// The one header naming the client (`--client-address-header`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientHeader {
    /// `X-Forwarded-For`: what nginx, HAProxy and most load balancers append.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239), its `for=` parameters.
    Forwarded,
}

/// One `--client-address-header`: a header name, in any case.
pub fn parse_header(value: &str) -> Result<ClientHeader, String> {
    match value.to_ascii_lowercase().as_str() {
        "x-forwarded-for" => Ok(ClientHeader::XForwardedFor),
        "forwarded" => Ok(ClientHeader::Forwarded),
        _ => Err(format!(
            "--client-address-header is x-forwarded-for or forwarded, not {value:?}"
        )),
    }
}

/// One `--trusted-proxy`: an address, or a network in CIDR notation.
pub fn parse(value: &str) -> Result<IpNet, String> {
    IpNet::from_str(value)
        .or_else(|_| IpAddr::from_str(value).map(IpNet::from))
        .map_err(|_| format!("{value:?} is neither an address nor a CIDR network"))
}

impl TrustedProxies {
    /// Believes `header` on a request from any of `proxies`.
    pub fn new(proxies: Vec<IpNet>, header: ClientHeader) -> TrustedProxies {
        TrustedProxies { proxies, header }
    }

    fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.proxies.iter().any(|net| net.contains(&address))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.proxies.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let lines = headers
            .get_all(match self.header {
                ClientHeader::XForwardedFor => "x-forwarded-for",
                ClientHeader::Forwarded => "forwarded",
            })
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        let hops: Vec<Option<IpAddr>> = match self.header {
            ClientHeader::XForwardedFor => lines.map(|hop| address(hop.trim())).collect(),
            ClientHeader::Forwarded => lines
                .map(|element| {
                    element
                        .split(';')
                        .filter_map(|pair| pair.trim().split_once('='))
                        .find(|(name, _)| name.eq_ignore_ascii_case("for"))
                        .and_then(|(_, value)| address(value.trim().trim_matches('"')))
                })
                .collect(),
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
        client_by(ClientHeader::XForwardedFor, trusted, peer, headers)
    }

    fn client_by(
        header: ClientHeader,
        trusted: &[&str],
        peer: &str,
        headers: &[(&str, &str)],
    ) -> String {
        let proxies =
            TrustedProxies::new(trusted.iter().map(|t| parse(t).unwrap()).collect(), header);
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

    /// Issue 47, item 5: only the header the operator names is read, so a
    /// client's own `Forwarded`, passed through by a proxy appending
    /// `X-Forwarded-For`, names nobody (and the other way round).
    #[test]
    fn only_the_named_header_is_read() {
        let trusted = ["10.0.0.0/8", "::1"];
        let both = [
            (
                "forwarded",
                r#"for=198.51.100.9;proto=https, for="[2001:db8::17]:4711""#,
            ),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        let xff = ClientHeader::XForwardedFor;
        let fwd = ClientHeader::Forwarded;
        assert_eq!(client_by(xff, &trusted, "10.0.0.1", &both), "203.0.113.7");
        assert_eq!(client_by(fwd, &trusted, "10.0.0.1", &both), "2001:db8::17");
        // The named header absent: the proxy itself, never the other one.
        let forwarded_only = [("forwarded", "for=198.51.100.9")];
        assert_eq!(
            client_by(xff, &trusted, "10.0.0.1", &forwarded_only),
            "10.0.0.1"
        );
        let xff_only = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client_by(fwd, &trusted, "10.0.0.1", &xff_only), "10.0.0.1");
        // Forwarded read right to left past trusted hops, like X-Forwarded-For.
        let chain = [(
            "forwarded",
            "for=198.51.100.9, for=203.0.113.7;proto=https, for=10.0.0.2",
        )];
        assert_eq!(client_by(fwd, &trusted, "10.0.0.1", &chain), "203.0.113.7");
        let ported = [("forwarded", "for=\"203.0.113.7:8080\";by=10.0.0.1")];
        assert_eq!(client_by(fwd, &trusted, "::1", &ported), "203.0.113.7");
        let hidden = [("forwarded", "for=_hidden")];
        assert_eq!(client_by(fwd, &trusted, "10.0.0.1", &hidden), "10.0.0.1");
    }

    /// Issue 47, item 5: the flag takes the two header names, in any case,
    /// and refuses anything else naming itself.
    #[test]
    fn the_header_is_one_of_two_names() {
        assert_eq!(
            parse_header("x-forwarded-for"),
            Ok(ClientHeader::XForwardedFor)
        );
        assert_eq!(
            parse_header("X-Forwarded-For"),
            Ok(ClientHeader::XForwardedFor)
        );
        assert_eq!(parse_header("Forwarded"), Ok(ClientHeader::Forwarded));
        assert_eq!(
            parse_header("x-real-ip"),
            Err(
                r#"--client-address-header is x-forwarded-for or forwarded, not "x-real-ip""#
                    .into()
            )
        );
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
