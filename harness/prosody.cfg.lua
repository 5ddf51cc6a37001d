-- Prosody for boxmq's XMPP tests and benchmarks (docs/xmpp.md). Everything comes from the
-- environment harness/prosody.py sets (Prosody's config parser reads ENV_* names), and all
-- state lives under $BOXMQ_PROSODY_DIR, so each test session or bench run gets its own server
-- on free ports.
local base = ENV_BOXMQ_PROSODY_DIR or "."

admins = { }
modules_enabled = { "disco"; "roster"; "saslauth"; "ping"; "posix" }
-- offline is autoloaded otherwise: an event to a gone resource must bounce, not be stored.
modules_disabled = { "s2s"; "offline" }

interfaces = { "127.0.0.1" }
c2s_ports = { tonumber(ENV_BOXMQ_C2S_PORT) }
component_ports = { tonumber(ENV_BOXMQ_COMPONENT_PORT) }
component_interfaces = { "127.0.0.1" }

data_path = base .. "/data"
pidfile = base .. "/prosody.pid"
certificates = base .. "/certs"
log = {
    { levels = { min = "info" }, to = "file", filename = base .. "/prosody.log" };
    { levels = { min = "error" }, to = "console" };
}

-- Loopback only, no TLS: mod_tls is not loaded, so no STARTTLS is offered.
c2s_require_encryption = false
s2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_hashed"
storage = "internal"

-- Without this, Prosody 0.12 keeps Nagle on: 20-40 ms per round trip (research/xmpp.md §3).
network_settings = { nagle = false; opportunistic_writes = true }

-- CI runs as root; the prosody binary would refuse (and half-start) without this.
run_as_root = ENV_BOXMQ_PROSODY_AS_ROOT == "1"

-- 512 KiB (Prosody's default) unless a test raises it, as boxmq's --xmpp-stanza-size-limit.
-- Global: mod_component reads it once for every component (a Component section's is ignored).
component_stanza_size_limit = tonumber(ENV_BOXMQ_COMPONENT_STANZA_SIZE_LIMIT)

VirtualHost "localhost"

-- Prosody's own pubsub, for bench/xmpp.py's comparison.
Component "pubsub.localhost" "pubsub"
    admins = { "carol@localhost" }   -- mod_pubsub lets only admins create nodes

Component "queue.localhost"
    component_secret = ENV_BOXMQ_COMPONENT_SECRET
