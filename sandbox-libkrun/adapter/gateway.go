package adapter

import (
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
)

// GuestGateway is the guest's gateway on qemu's user network. For a VM worker it reaches the
// host's engine port (EngineAccess); for a sandbox it reaches no loopback service of the host.
const GuestGateway = "10.0.2.2"

var loopbackURL = regexp.MustCompile(`://(localhost|127\.0\.0\.1):([0-9]+)`)

// RewriteLoopback points URLs at the host's loopback (`://localhost:<port>`,
// `://127.0.0.1:<port>`) in KEY=VALUE entries at the guest's gateway instead, so a VM worker
// reaches the engine that listens on the host (the only loopback port its machine is granted).
func RewriteLoopback(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = loopbackURL.ReplaceAllString(kv, "://"+GuestGateway+":$2")
	}
	return out
}

// EngineAccess is the host access a VM worker's machine is granted (vm.Spec.HostAccess): the
// port of the engine the adapter itself connects to (engineURL, e.g. ws://127.0.0.1:49134), on
// 127.0.0.1, where the guest's gateway lands; there the worker presents the project token. An
// engine elsewhere gets no grant: one on another address of the network is reached as any other
// address.
func EngineAccess(engineURL string) []netip.AddrPort {
	u, err := url.Parse(engineURL)
	if err != nil {
		return nil
	}
	// qemu lands the gateway on 127.0.0.1 alone: an engine on another loopback address is out
	// of the guest's reach, and a grant of that port on 127.0.0.1 would open something else.
	if h := u.Hostname(); h != "localhost" && h != "127.0.0.1" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "wss" || u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil
	}
	return []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(p))}
}
