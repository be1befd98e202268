//! Validation of `[[job]]`s: each read through [`JobSettings::KEYS`], then what needs more than
//! one key or one job: a name is required and unique, a token is given once (plain or hashed),
//! and `client_auth = "required"` needs a token for every job.

use std::sync::Arc;

use super::Validator;
use crate::config::file::Section;
use crate::config::{ClientAuth, JobSettings};

impl Validator<'_> {
    /// The `[[job]]`s in file order; a job without a usable name is reported and left out.
    pub(in crate::config) fn jobs(
        &mut self,
        sections: &[Section<'_>],
        client_auth: ClientAuth,
    ) -> Vec<Arc<JobSettings>> {
        let mut jobs: Vec<Arc<JobSettings>> = Vec::new();
        for (i, section) in sections.iter().enumerate() {
            let number = i + 1;
            let path = format!("[[job]] {number}: ");
            let label = format!("job {number}");
            let mut job = JobSettings::default();
            self.keys(section, &[JobSettings::KEYS], (&label, &path), &mut job);
            if job.name.is_empty() {
                if section.get("name").is_none() {
                    self.error(section.at, &format!("{path}missing field `name`"));
                }
                continue;
            }
            let label = format!("job {number} ({})", job.name);
            let at = section.at("name").unwrap_or(section.at);
            if jobs.iter().any(|j| j.name == job.name) {
                self.error(
                    at,
                    &format!("{label}: name {:?} is given to an earlier job", job.name),
                );
                continue;
            }
            if job.token.is_some() && job.token_sha256.is_some() {
                let at = section.at("token_sha256").unwrap_or(at);
                self.error(
                    at,
                    &format!("{label}: give token or token_sha256, not both"),
                );
            }
            if client_auth == ClientAuth::Required && !job.has_token() {
                self.error(
                    at,
                    &format!("{label}: with [proxy] client_auth = \"required\" every job needs a token (or token_sha256)"),
                );
            }
            jobs.push(Arc::new(job));
        }
        jobs
    }
}
