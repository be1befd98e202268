//! How a host is spelled and named: one canonical spelling per host, so that every other layer compares names, not spellings.

pub mod host_name;
