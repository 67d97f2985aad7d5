// Package webguard holds the checks a WebSocket port of the engine makes of a browser's
// upgrade request: a Host that a DNS-rebound name could have sent, and an Origin that is neither
// the port's own nor one the user listed. The engine's listeners and the stream port use it.
package webguard

import (
	"net"
	"net/url"
	"path"
	"strings"
)

// RebindSafeHost reports whether a Host header cannot come from a DNS-rebound name: a loopback
// name (localhost, *.localhost) or any IP address (DNS rebinding needs a name; an address is
// what a VM worker uses).
func RebindSafeHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return loopbackName(host) || net.ParseIP(trim(host)) != nil
}

// LoopbackOrigin reports whether a browser origin is a page served from a loopback name or
// address (a development server on the user's own machine).
func LoopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if loopbackName(u.Hostname()) {
		return true
	}
	ip := net.ParseIP(trim(u.Hostname()))
	return ip != nil && ip.IsLoopback()
}

// OriginAllowed reports whether a browser origin may connect to host: same host, or a match of
// one of the patterns (path.Match, case-insensitive; a pattern with "://" is matched against
// scheme://host, any other against the host). "null" and origins without a host match nothing.
func OriginAllowed(origin, host string, patterns []string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// loopbackName reports whether host (no port) is localhost or a name under .localhost.
func loopbackName(host string) bool {
	host = strings.ToLower(trim(host))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// trim drops an IPv6 literal's brackets and a fully qualified name's final dot.
func trim(host string) string { return strings.TrimSuffix(strings.Trim(host, "[]"), ".") }
