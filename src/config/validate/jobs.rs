//! Validation of `[[job]]`s: each read through [`JobSettings::KEYS`], then what needs more than
//! one key or one job: a name is required and unique, a token is given once (plain or hashed),
//! and `client_auth = "required"` needs a token for every job; a job's own signing key is read,
//! and signs only with a Signature-Agent (its own or `[signing]`'s).

use std::sync::Arc;

use super::Validator;
use crate::config::file::Section;
use crate::config::{ClientAuth, JobSettings, SigningSettings};

impl Validator<'_> {
    /// The `[[job]]`s in file order; a job without a usable name is reported and left out.
    pub(in crate::config) fn jobs(
        &mut self,
        sections: &[Section<'_>],
        client_auth: ClientAuth,
        signing: &SigningSettings,
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
            self.job_key(section, &label, &mut job, signing);
            jobs.push(Arc::new(job));
        }
        jobs
    }

    /// Reads the job's `signing_key_file` (the error names the file, never its content); a key
    /// needs a Signature-Agent, the job's own or `[signing]`'s.
    fn job_key(
        &mut self,
        section: &Section<'_>,
        label: &str,
        job: &mut JobSettings,
        signing: &SigningSettings,
    ) {
        let Some(path) = job.signing_key_file.clone() else {
            return;
        };
        let at = section.at("signing_key_file").unwrap_or(section.at);
        match crate::config::signing::read_key(&path, "the key file") {
            Ok(key) => job.signing_key = Some(key),
            Err(why) => self.error(at, &format!("{label}: signing_key_file: {why}")),
        }
        if job.signature_agent.is_none() && signing.signature_agent.is_none() {
            self.error(
                at,
                &format!(
                    "{label}: signing_key_file needs a signature_agent (the job's own or \
                     [signing]'s): the https:// URL where its key directory is published"
                ),
            );
        }
    }
}
