//! Everything the soak decides by chance, decided by a seeded hash instead: which host a request
//! goes to, whether it is a POST, each host's weather, what the origin does with each try, and the
//! bytes of every body. The same `--seed` gives the same plan (only the timing differs), so a
//! finding can be looked at again.

/// Mixes `words` into one 64-bit value (splitmix64 steps): the soak's only source of chance.
pub fn mix(words: &[u64]) -> u64 {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for &w in words {
        state = splitmix(state ^ w);
    }
    state
}

/// One splitmix64 step: a well-spread 64-bit value from any input.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Labels that keep the plan's different draws apart.
mod salt {
    pub const HOST: u64 = 1;
    pub const POST: u64 = 2;
    pub const WEATHER: u64 = 3;
    pub const BEHAVIOUR: u64 = 4;
    pub const SIZE: u64 = 5;
    pub const BYTES: u64 = 6;
    pub const DETAIL: u64 = 7;
}

/// How long one spell of a host's weather lasts: storms come and go within a run.
pub const WEATHER_SPELL_MS: u64 = 4_000;

/// The host (index 0..hosts) request `id` goes to.
pub fn host_of(seed: u64, id: u64, hosts: usize) -> usize {
    (mix(&[seed, salt::HOST, id]) % hosts as u64) as usize
}

/// Whether request `id` is a POST (one in ten), with the body [`post_body`].
pub fn is_post(seed: u64, id: u64) -> bool {
    mix(&[seed, salt::POST, id]) % 10 == 0
}

/// A host's weather during one spell: how often its origin misbehaves, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weather {
    /// Almost every answer is a 200.
    Clear,
    /// A few faults of every kind.
    Drizzle,
    /// Many 429s with Retry-After.
    Throttling,
    /// Many 503s, with and without Retry-After.
    Overloaded,
}

/// The weather of `host` at `elapsed_ms` since the origin started.
pub fn weather(seed: u64, host: usize, elapsed_ms: u64) -> Weather {
    let spell = elapsed_ms / WEATHER_SPELL_MS;
    match mix(&[seed, salt::WEATHER, host as u64, spell]) % 100 {
        0..=59 => Weather::Clear,
        60..=84 => Weather::Drizzle,
        85..=92 => Weather::Throttling,
        _ => Weather::Overloaded,
    }
}

/// What the origin does with one try of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Behaviour {
    /// 200 with a checked body, in one piece with a length.
    Ok,
    /// 200 with a checked body, chunked and sent in pieces.
    Streamed,
    /// 200 with a checked body, then the connection is closed.
    CloseAfter,
    /// The request is read and the socket dropped without an answer.
    Reset,
    /// No answer for longer than courtesy's response timeout, then the socket is dropped.
    Hang,
    /// Bytes that are not HTTP, then the socket is dropped.
    Garbage,
    /// 429 with `Retry-After: 1..4`.
    Throttled,
    /// 503 with `Retry-After: 1..3`.
    UnavailableFor,
    /// 503 without `Retry-After`.
    Unavailable,
}

impl Behaviour {
    /// Whether the origin sent a complete HTTP answer (a second arrival of an answered id is a
    /// duplicate; of an unanswered one, a resend).
    pub fn answered(self) -> bool {
        !matches!(
            self,
            Behaviour::Reset | Behaviour::Hang | Behaviour::Garbage
        )
    }

    /// Whether the answer refuses for now (a 429 or a 503): a GET sent again after it is
    /// courtesy's own retry after the window (`retry_idempotent`), not a duplicate.
    pub fn refused_for_now(self) -> bool {
        matches!(
            self,
            Behaviour::Throttled | Behaviour::UnavailableFor | Behaviour::Unavailable
        )
    }

    /// The name the report uses.
    pub fn name(self) -> &'static str {
        match self {
            Behaviour::Ok => "200",
            Behaviour::Streamed => "200 chunked in pieces",
            Behaviour::CloseAfter => "200 then close",
            Behaviour::Reset => "reset (no answer)",
            Behaviour::Hang => "hang (no answer)",
            Behaviour::Garbage => "garbage (not HTTP)",
            Behaviour::Throttled => "429 + Retry-After",
            Behaviour::UnavailableFor => "503 + Retry-After",
            Behaviour::Unavailable => "503 without Retry-After",
        }
    }
}

/// What the origin does with try `attempt` (0 for the first) of request `id` at `host` in
/// `weather`. Per mille: the thresholds of each fault, then 200s split three ways.
pub fn behaviour(seed: u64, host: usize, id: u64, attempt: u32, weather: Weather) -> Behaviour {
    // [reset, hang, garbage, 429, 503 + Retry-After, 503, close after]
    let table: [u64; 7] = match weather {
        Weather::Clear => [4, 2, 3, 6, 3, 3, 20],
        Weather::Drizzle => [25, 6, 15, 25, 12, 12, 40],
        Weather::Throttling => [5, 2, 5, 300, 10, 10, 30],
        Weather::Overloaded => [10, 4, 5, 10, 150, 150, 30],
    };
    let kinds = [
        Behaviour::Reset,
        Behaviour::Hang,
        Behaviour::Garbage,
        Behaviour::Throttled,
        Behaviour::UnavailableFor,
        Behaviour::Unavailable,
        Behaviour::CloseAfter,
    ];
    let mut roll = mix(&[seed, salt::BEHAVIOUR, host as u64, id, u64::from(attempt)]) % 1000;
    for (share, kind) in table.iter().zip(kinds) {
        if roll < *share {
            return kind;
        }
        roll -= share;
    }
    if roll % 4 == 0 {
        Behaviour::Streamed
    } else {
        Behaviour::Ok
    }
}

/// The `Retry-After` seconds of a 429 (1..=4) or of a 503 that has one (1..=3).
pub fn retry_after(seed: u64, id: u64, attempt: u32, behaviour: Behaviour) -> u64 {
    let roll = mix(&[seed, salt::DETAIL, id, u64::from(attempt)]);
    match behaviour {
        Behaviour::Throttled => 1 + roll % 4,
        _ => 1 + roll % 3,
    }
}

/// How many pieces a streamed body is sent in (2..=8), and the pause between them in ms (1..=5).
pub fn pieces(seed: u64, id: u64) -> (usize, u64) {
    let roll = mix(&[seed, salt::DETAIL, id, 99]);
    (2 + (roll % 7) as usize, 1 + (roll >> 8) % 5)
}

/// The payload length of request `id`'s 200: seven in ten small (8 B..4 KiB), the rest spread
/// evenly on a log scale up to 256 KiB.
pub fn payload_len(seed: u64, id: u64) -> usize {
    let roll = mix(&[seed, salt::SIZE, id]);
    if roll % 10 < 7 {
        8 + ((roll >> 8) % 4089) as usize
    } else {
        let exp = 12.0 + ((roll >> 8) % 6001) as f64 / 1000.0; // 2^12 .. 2^18
        (2f64.powf(exp) as usize).min(256 * 1024)
    }
}

/// `len` printable bytes drawn from `(seed, id, which)`: a payload nobody could produce by accident
/// for another id.
pub fn bytes(seed: u64, id: u64, which: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut state = mix(&[seed, salt::BYTES, id, which]);
    while out.len() < len {
        state = splitmix(state);
        out.extend(state.to_le_bytes().iter().map(|b| b'a' + b % 26));
    }
    out.truncate(len);
    out
}

/// FNV-1a 64 of `data`: the checksum a body carries and the client checks.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The body of a 200 for `id`: a first line with the id, the payload's length and checksum, then
/// the payload.
pub fn body_200(seed: u64, id: u64) -> Vec<u8> {
    let payload = bytes(seed, id, 0, payload_len(seed, id));
    let mut body = format!(
        "soak id={id} len={} fnv={:016x}\n",
        payload.len(),
        checksum(&payload)
    )
    .into_bytes();
    body.extend_from_slice(&payload);
    body
}

/// Why a 200's body does not belong to request `id` (`None`: it does, byte for byte).
pub fn check_body_200(seed: u64, id: u64, body: &[u8]) -> Option<String> {
    let Some(nl) = body.iter().position(|&b| b == b'\n') else {
        return Some(format!("no first line in {} bytes", body.len()));
    };
    let head = String::from_utf8_lossy(&body[..nl]).to_string();
    let payload = &body[nl + 1..];
    let want_head = format!(
        "soak id={id} len={} fnv={:016x}",
        payload.len(),
        checksum(payload)
    );
    if head != want_head {
        return Some(format!(
            "first line {head:?}, but the {} payload bytes make {want_head:?}",
            payload.len()
        ));
    }
    if body != body_200(seed, id).as_slice() {
        return Some("payload differs from the planned bytes".into());
    }
    None
}

/// The body of POST `id` (1..8 KiB), which the origin checks against `x-soak-sum`.
pub fn post_body(seed: u64, id: u64) -> Vec<u8> {
    let len = 1024 + (mix(&[seed, salt::SIZE, id, 1]) % 7169) as usize;
    bytes(seed, id, 1, len)
}
