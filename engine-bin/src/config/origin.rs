//! One normal form for web origins (`http.allowed_origins`, the `Origin` header) and host
//! names (`http.allowed_hosts`, the `Host` header), so validation and the API's checks agree
//! on what an entry means: lowercase, the scheme's default port left out.

/// `text` (`scheme://host[:port]`) as a normal origin, or what is wrong with it.
pub fn normal_origin(text: &str) -> Result<String, String> {
    let (scheme, authority) = text
        .trim()
        .split_once("://")
        .ok_or("must be scheme://host[:port], like `https://console.example.com`")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return Err("the scheme must be http or https".into()),
    };
    if authority.contains(['/', '?', '#', '@']) {
        return Err("an origin has no path, query or user: scheme://host[:port]".into());
    }
    let authority = normal_authority(authority, Some(default_port))?;
    Ok(format!("{scheme}://{authority}"))
}

/// `text` (`host` or `host:port`, an IPv6 address in brackets) as a normal host, or what is
/// wrong with it.
pub fn normal_host(text: &str) -> Result<String, String> {
    normal_authority(text.trim(), None)
}

/// The host name of a normal host or authority, without its port (an IPv6 address keeps its
/// brackets).
pub fn host_name(authority: &str) -> &str {
    split_host_port(authority).map_or(authority, |(host, _)| host)
}

fn normal_authority(text: &str, default_port: Option<&str>) -> Result<String, String> {
    let lower = text.to_ascii_lowercase();
    let (host, port) = split_host_port(&lower)?;
    let name_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
    };
    if !name_ok {
        return Err(format!("`{text}` is not a host name or address"));
    }
    Ok(match port {
        Some(p) if Some(p) != default_port => format!("{host}:{p}"),
        _ => host.to_owned(),
    })
}

/// `host[:port]` split at the port, which must be a number if present.
fn split_host_port(text: &str) -> Result<(&str, Option<&str>), String> {
    let (host, port) = if text.starts_with('[') {
        match text.find(']') {
            Some(end) => match &text[end + 1..] {
                "" => (text, None),
                rest => (
                    &text[..=end],
                    Some(rest.strip_prefix(':').ok_or("junk after `]`")?),
                ),
            },
            None => return Err(format!("`{text}`: `[` without `]`")),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if let Some(p) = port {
        p.parse::<u16>()
            .map_err(|_| format!("`{text}`: `{p}` is not a port"))?;
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_hosts_have_one_normal_form() {
        for (text, normal) in [
            ("https://Console.Example.com", "https://console.example.com"),
            ("https://a.example:443", "https://a.example"),
            ("http://127.0.0.1:80", "http://127.0.0.1"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://[::1]:8080", "http://[::1]:8080"),
        ] {
            assert_eq!(normal_origin(text).as_deref(), Ok(normal), "{text}");
        }
        for bad in [
            "console.example.com",
            "ftp://a.example",
            "https://a.example/ui",
            "https://user@a.example",
            "https://a.example:port",
            "https://",
            "null",
            "https://[::1",
        ] {
            assert!(normal_origin(bad).is_err(), "{bad}");
        }
        assert_eq!(
            normal_host("LocalHost:8080").as_deref(),
            Ok("localhost:8080")
        );
        assert_eq!(normal_host("[::1]").as_deref(), Ok("[::1]"));
        assert!(normal_host("a b").is_err());
        assert!(normal_host("").is_err());
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("ax.example:8080"), "ax.example");
        assert_eq!(host_name("ax.example"), "ax.example");
    }
}
