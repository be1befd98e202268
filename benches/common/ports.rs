//! Loopback ports for the courtesy child processes the benches start, picked by the system so
//! that two benches (or two runs) never fight over a fixed number.

/// A free loopback port (bound and released; courtesy binds it right after).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
