//! `[cluster]`: this node's name and its shared store.

use super::*;

impl Validator<'_> {
    pub(super) fn cluster(&mut self, file: &FileConfig) -> ClusterConfig {
        let c = &file.cluster;
        let store = match c.store.as_str() {
            "local" => StoreKind::Local,
            "redis" => StoreKind::Redis,
            other => {
                self.err(
                    "cluster.store",
                    format!("must be \"local\" or \"redis\", got \"{other}\""),
                );
                StoreKind::Local
            }
        };
        let on_store_failure = match c.on_store_failure.as_str() {
            "last_share" => OnStoreFailure::LastShare,
            "open" => OnStoreFailure::Open,
            "closed" => OnStoreFailure::Closed,
            other => {
                self.err(
                    "cluster.on_store_failure",
                    format!("must be \"last_share\", \"open\" or \"closed\", got \"{other}\""),
                );
                OnStoreFailure::LastShare
            }
        };
        if c.sync_interval < Duration::from_millis(100) || c.sync_interval > Duration::from_secs(10)
        {
            self.err("cluster.sync_interval", "must be between 100ms and 10s");
        }
        let node = c.node.trim();
        if !node.is_empty() && !is_node_name(node) {
            self.err(
                "cluster.node",
                "may hold letters, digits and . _ - : only (at most 64)",
            );
        }
        if c.key_prefix.is_empty() || c.key_prefix.len() > 64 || c.key_prefix.contains(' ') {
            self.err(
                "cluster.key_prefix",
                "must be 1 to 64 characters, without spaces",
            );
        }
        let mut redis = Vec::new();
        if store == StoreKind::Redis {
            if c.redis.is_empty() {
                self.err("cluster.redis", "needs the Redis server's URL");
            }
            for (i, url) in c.redis.iter().enumerate() {
                match self.host.check_store_url(url) {
                    Ok(()) => redis.push(url.clone()),
                    Err(e) => self.err(
                        format!("cluster.redis[{i}]"),
                        format!(
                            "is not a Redis URL like \"redis://10.0.0.5:6379/0\": {}",
                            crate::config::redact_url(&e)
                        ),
                    ),
                }
            }
        }
        ClusterConfig {
            store,
            redis,
            node: (!node.is_empty()).then(|| node.to_owned()),
            sync_interval: c.sync_interval,
            on_store_failure,
            key_prefix: c.key_prefix.clone(),
        }
    }
}

/// Names that appear in metrics labels and headers.
fn is_node_name(s: &str) -> bool {
    s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}
