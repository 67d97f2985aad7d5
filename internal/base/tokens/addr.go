// addrKey and urlKey name an engine by its address in file names: the per-user records under
// ~/.iii (Compose's project-token records, the engine's owner credential) are keyed by it, so a
// writer and a reader that spell one engine differently (localhost, 0.0.0.0, [::1], a default
// port) still meet on one file.

package tokens

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// addrKey is the key of an engine listening on host:port: <host>_<port>, with localhost, an empty
// host and an unspecified address (0.0.0.0, ::) read as 127.0.0.1 (the address a client on this
// host reaches it at), IP addresses in canonical form, and anything unsafe in a file name escaped.
func addrKey(host, port string) string {
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "localhost" || host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			ip = net.IPv4(127, 0, 0, 1)
		}
		host = ip.String()
	}
	return url.QueryEscape(host) + "_" + url.QueryEscape(port)
}

// urlKey is addrKey of a ws:// or wss:// engine urlKey (default ports 80 and 443).
func urlKey(engineURL string) (string, error) {
	u, err := url.Parse(engineURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Hostname() == "" {
		return "", fmt.Errorf("engine url %q is not a ws:// or wss:// urlKey with a host", engineURL)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"ws": "80", "wss": "443"}[u.Scheme]
	}
	return addrKey(u.Hostname(), port), nil
}
