package adapter

import "regexp"

// GuestGateway is the host as a guest with networking sees it (qemu user networking).
const GuestGateway = "10.0.2.2"

var loopbackURL = regexp.MustCompile(`://(localhost|127\.0\.0\.1):([0-9]+)`)

// RewriteLoopback points URLs at the host's loopback (`://localhost:<port>`,
// `://127.0.0.1:<port>`) in KEY=VALUE entries at the guest's gateway instead, so a guest reaches
// services such as the engine that listen on the host.
func RewriteLoopback(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = loopbackURL.ReplaceAllString(kv, "://"+GuestGateway+":$2")
	}
	return out
}
