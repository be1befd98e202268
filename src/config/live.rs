//! The config in force while courtesy runs: one shared handle that every part reading settings per
//! request holds (the proxy, the limiter, the admin API, the webhook). A reload replaces the whole
//! config at once, so a request sees either the old one or the new one, never a mix.

use std::sync::{Arc, RwLock};

use super::Config;

/// A shared, replaceable [`Config`]. Cloning shares it.
#[derive(Debug, Clone)]
pub struct LiveConfig(Arc<RwLock<Arc<Config>>>);

impl LiveConfig {
    /// `config`, in force until replaced.
    pub fn new(config: Arc<Config>) -> Self {
        LiveConfig(Arc::new(RwLock::new(config)))
    }

    /// The config in force now.
    pub fn get(&self) -> Arc<Config> {
        crate::util::locks::read(&self.0).clone()
    }

    /// Puts `config` in force for everyone sharing this handle; returns the one it replaces.
    pub fn replace(&self, config: Arc<Config>) -> Arc<Config> {
        std::mem::replace(&mut *crate::util::locks::write(&self.0), config)
    }
}
