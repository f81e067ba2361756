//! Chat and webhook services that carry their credential in the URL path.
//!
//! Slack, Feishu/Lark, Discord and Teams incoming webhooks have no separate secret: whoever
//! knows the path can post. For these hosts the path is shown up to the service's fixed
//! word (`/services`, `/hook`, `/webhooks`, ...) and the rest is a secret like a password.
//! Services that put the token in the query (DingTalk's `access_token`) need nothing here:
//! every query value is masked anyway.

use url::Url;

/// A service: which hosts are its, and the path segment after which its token starts.
struct Service {
    /// Exact host names.
    hosts: &'static [&'static str],
    /// Domains whose every subdomain is the service's (`*.webhook.office.com`).
    domains: &'static [&'static str],
    /// The path is kept up to and including the first of these segments.
    markers: &'static [&'static str],
}

const SERVICES: &[Service] = &[
    Service {
        hosts: &["hooks.slack.com"],
        domains: &[],
        markers: &["services", "workflows", "triggers"],
    },
    Service {
        hosts: &["open.feishu.cn", "open.larksuite.com"],
        domains: &[],
        markers: &["hook"],
    },
    Service {
        hosts: &["discord.com", "discordapp.com"],
        domains: &["discord.com", "discordapp.com"],
        markers: &["webhooks"],
    },
    Service {
        hosts: &["outlook.office.com", "outlook.office365.com"],
        domains: &["webhook.office.com"],
        markers: &["webhook", "webhookb2"],
    },
];

fn service(url: &Url) -> Option<&'static Service> {
    let host = url.host_str()?.trim_end_matches('.');
    SERVICES.iter().find(|s| {
        s.hosts.contains(&host)
            || s.domains.iter().any(|d| {
                host.strip_suffix(d)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1)
            })
    })
}

/// Whether a path segment is a Telegram bot token (`bot123456:AA...` or `123456:AA...`): a
/// number, a colon and a long key. It is masked on any host, since proxies of the Bot API
/// carry it as `api.telegram.org` does.
pub(super) fn is_bot_token(segment: &str) -> bool {
    let bare = segment.strip_prefix("bot").unwrap_or(segment);
    let Some((id, key)) = bare.split_once(':') else {
        return false;
    };
    id.len() >= 5
        && id.bytes().all(|b| b.is_ascii_digit())
        && key.len() >= 20
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// For a known webhook host, the shown part of the path (up to its marker; empty when the
/// path has none) and the secret rest (`None` when nothing follows). `None` for other hosts.
pub(super) fn split_path(url: &Url) -> Option<(String, Option<String>)> {
    let service = service(url)?;
    let path = url.path();
    let mut kept = 0;
    for (i, segment) in path.split('/').enumerate().skip(1) {
        if service.markers.contains(&segment) {
            kept = i;
            break;
        }
    }
    let segments: Vec<&str> = path.split('/').collect();
    let shown = segments[..=kept].join("/");
    let rest = segments[kept + 1..].join("/");
    Some((shown, (!rest.is_empty()).then_some(rest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Option<(String, Option<String>)> {
        split_path(&Url::parse(url).unwrap())
    }

    #[test]
    fn bot_tokens_are_told_from_other_segments() {
        assert!(is_bot_token(
            "bot123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"
        ));
        assert!(is_bot_token(
            "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"
        ));
        for other in [
            "bot",
            "sendMessage",
            "v1:short",
            "abc:AAHfiqksKZ8WmR2zSjiQ7_v4TMAK",
        ] {
            assert!(!is_bot_token(other), "{other}");
        }
    }

    #[test]
    fn known_hosts_keep_their_fixed_words_only() {
        let s = |a: &str, b: Option<&str>| Some((a.to_owned(), b.map(str::to_owned)));
        assert_eq!(
            split("https://hooks.slack.com/services/T0/B0/xyz"),
            s("/services", Some("T0/B0/xyz"))
        );
        assert_eq!(
            split("https://open.feishu.cn/open-apis/bot/v2/hook/tok"),
            s("/open-apis/bot/v2/hook", Some("tok"))
        );
        assert_eq!(
            split("https://ptb.discord.com/api/webhooks/1/tok"),
            s("/api/webhooks", Some("1/tok"))
        );
        assert_eq!(
            split("https://corp.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d"),
            s("/webhookb2", Some("a@b/IncomingWebhook/c/d"))
        );
        assert_eq!(split("https://HOOKS.slack.com./x/y"), s("", Some("x/y")));
        assert_eq!(
            split("https://hooks.slack.com/services"),
            s("/services", None)
        );
        assert_eq!(split("https://example.com/services/x"), None);
        assert_eq!(split("https://webhook.office.com/x"), None);
        assert_eq!(split("https://notdiscord.com/api/webhooks/1/t"), None);
    }
}
