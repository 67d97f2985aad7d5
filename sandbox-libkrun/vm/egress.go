package vm

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Egress is the outbound policy of a networked machine: which destinations its qemu may connect
// or send to on the guest's behalf, and which names the guest's DNS may ask about. It is set by
// whoever creates the machine (a sandbox::create caller, the operator's per-image setting) and
// checked on the host, outside the guest's reach (the qemu driver's network guard).
//
// A deny entry wins over an allow entry. With a non-empty Allow only what it names is reachable.
// The private and special ranges (SpecialRanges) are refused unless an allow entry names them
// explicitly: an IP or CIDR inside the range, or a name the host resolves there.
type Egress struct {
	Allow []EgressRule
	Deny  []EgressRule
}

// EgressRule is one entry of a policy: a host (a name, a wildcard name, an IP or a CIDR, or any
// host) and a port range.
type EgressRule struct {
	Text   string       // the entry as written
	Name   string       // lower-case host name without a final dot; "*.example.com" for a wildcard; "" otherwise
	Prefix netip.Prefix // an IP (a full-length prefix) or a CIDR; invalid for a name or any host
	Lo, Hi uint16       // the port range; 0, 0 for every port
}

// SpecialRanges are refused under a policy unless an allow entry names them: the private
// (RFC 1918, fc00::/7), shared (100.64/10), link-local (169.254/16 with cloud metadata services,
// fe80::/10), "this network" (0/8), multicast, reserved (240/4 with the broadcast address) and
// IPv4-compatible IPv6 ranges, and loopback (which the driver's guard refuses before any policy
// is asked: the host's own services are never reachable).
var SpecialRanges = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("::/96"),
}

// special returns the special range a is in, if any.
func special(a netip.Addr) (netip.Prefix, bool) {
	for _, r := range SpecialRanges {
		if r.Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// ParseNetwork reads the network value of a create request or of the per-image setting, as
// decoded from JSON: false or "off" (no network), true or "on" (the outside, no policy), or an
// object {"allow": [...], "deny": [...]}. It returns whether the machine has a network and its
// policy (nil under "on"). Errors name key and the offending entry.
func ParseNetwork(key string, v any) (bool, *Egress, error) {
	switch t := v.(type) {
	case nil:
		return false, nil, nil
	case bool:
		return t, nil, nil
	case string:
		switch t {
		case "off":
			return false, nil, nil
		case "on":
			return true, nil, nil
		}
		return false, nil, fmt.Errorf("%s: %q is not a network mode (accepted: false or \"off\", true or \"on\", or a policy {\"allow\": [...], \"deny\": [...]})", key, t)
	case map[string]any:
		e := &Egress{}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			var dst *[]EgressRule
			switch k {
			case "allow":
				dst = &e.Allow
			case "deny":
				dst = &e.Deny
			default:
				return false, nil, fmt.Errorf("%s.%s: unknown key of a network policy (accepted: allow, deny)", key, k)
			}
			list, ok := t[k].([]any)
			if !ok && t[k] != nil {
				return false, nil, fmt.Errorf("%s.%s: must be a list of entries (host, *.domain, IP, CIDR, each with an optional :PORT or :LOW-HIGH, or :PORT)", key, k)
			}
			for i, item := range list {
				s, ok := item.(string)
				if !ok {
					return false, nil, fmt.Errorf("%s.%s[%d]: an entry must be a string, got %v", key, k, i, item)
				}
				r, err := ParseEgressRule(s)
				if err != nil {
					return false, nil, fmt.Errorf("%s.%s[%d]: %w", key, k, i, err)
				}
				*dst = append(*dst, r)
			}
		}
		return true, e, nil
	}
	return false, nil, fmt.Errorf("%s: must be false, true, \"off\", \"on\" or a policy {\"allow\": [...], \"deny\": [...]}, got %v", key, v)
}

// ParseEgressRule reads one policy entry: a host name (api.example.com), a wildcard name
// (*.example.com), an IP (192.0.2.2, 2001:db8::1), a CIDR (10.0.0.0/8), each optionally followed
// by :PORT or :LOW-HIGH (an IPv6 address or CIDR then in brackets), or a bare :PORT or *:PORT.
func ParseEgressRule(s string) (EgressRule, error) {
	r := EgressRule{Text: s}
	bad := func(why string) (EgressRule, error) {
		return EgressRule{}, fmt.Errorf("entry %q: %s", s, why)
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("an opening [ without its ]")
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return bad("after ] comes :PORT or :LOW-HIGH")
		}
		if !strings.Contains(host, ":") {
			return bad("brackets are for an IPv6 address or CIDR")
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(s, ":") {
			return bad("a port is missing after :")
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		host, port = s[:i], s[i+1:]
		if port == "" {
			return bad("a port is missing after :")
		}
	}
	if port != "" {
		lo, hi, err := parsePorts(port)
		if err != nil {
			return bad(err.Error())
		}
		r.Lo, r.Hi = lo, hi
	}
	switch {
	case host == "" || host == "*":
		if port == "" {
			return bad("an entry for any host needs a port (:PORT or *:PORT)")
		}
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return bad("not a CIDR (" + err.Error() + ")")
		}
		if p.Addr().Zone() != "" {
			return bad("a zone is not allowed")
		}
		if p != p.Masked() {
			return bad("bits are set beyond the prefix length; write " + p.Masked().String())
		}
		r.Prefix = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr()))
	case strings.Contains(host, ":") || isIPv4ish(host):
		if strings.Contains(host, ":") && !strings.HasPrefix(s, "[") && port != "" {
			return bad("an IPv6 address with a port goes in brackets: [ADDR]:PORT")
		}
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" {
			return bad("not an IP address")
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	default:
		name, err := checkName(host)
		if err != nil {
			return bad(err.Error())
		}
		r.Name = name
	}
	return r, nil
}

// unmapBits is what an IPv4-mapped prefix loses on becoming an IPv4 one.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// isIPv4ish reports whether s has the look of an IPv4 address (digits and dots only), which a
// name must not have.
func isIPv4ish(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == ""
}

func parsePorts(s string) (uint16, uint16, error) {
	one := func(p string) (uint16, error) {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
		return uint16(n), nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	l, err := one(lo)
	if err != nil {
		return 0, 0, err
	}
	if !isRange {
		return l, l, nil
	}
	h, err := one(hi)
	if err != nil {
		return 0, 0, err
	}
	if h < l {
		return 0, 0, fmt.Errorf("port range %s ends before it starts", s)
	}
	return l, h, nil
}

// checkName validates a host name or wildcard name (*.domain) and returns it in lower case
// without a final dot.
func checkName(s string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(s, "."))
	rest := strings.TrimPrefix(n, "*.")
	if len(n) > 253 || rest == "" {
		return "", errors.New("not a host name")
	}
	labels := strings.Split(rest, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "", errors.New("not a host name (letters, digits, - and _ in dot-separated labels, a wildcard only as a leading *.)")
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", errors.New("not a host name (its last label is a number)")
	}
	return n, nil
}

// MatchName reports whether the host name name (lower case, no final dot) is the rule's name
// or, for a wildcard *.domain, a name under domain (not domain itself).
func (r EgressRule) MatchName(name string) bool {
	if r.Name == "" {
		return false
	}
	if d, ok := strings.CutPrefix(r.Name, "*"); ok {
		return strings.HasSuffix(name, d) && len(name) > len(d)
	}
	return name == r.Name
}

func (r EgressRule) portOK(p uint16) bool {
	return r.Lo == 0 || r.Lo <= p && p <= r.Hi
}

// Resolver gives the addresses a name rule stands for: those the host resolves its name to
// (for a wildcard, the names under it the guest has looked up).
type Resolver interface {
	Addrs(r EgressRule) []netip.Addr
}

// match reports whether r names ap, and whether it names the address explicitly (an IP or CIDR,
// or a name resolving to it) rather than as any host.
func (r EgressRule) match(ap netip.AddrPort, res Resolver) (ok, explicit bool) {
	if !r.portOK(ap.Port()) {
		return false, false
	}
	a := ap.Addr().Unmap()
	switch {
	case r.Prefix.IsValid():
		return r.Prefix.Contains(a), true
	case r.Name != "":
		if res == nil {
			return false, false
		}
		return slices.Contains(res.Addrs(r), a), true
	}
	return true, false
}

// Permits reports whether the policy lets the machine reach ap (the host's loopback is refused
// before any policy is asked).
func (e *Egress) Permits(ap netip.AddrPort, res Resolver) bool {
	a := ap.Addr().Unmap()
	ap = netip.AddrPortFrom(a, ap.Port())
	for _, r := range e.Deny {
		if ok, _ := r.match(ap, res); ok {
			return false
		}
	}
	rng, isSpecial := special(a)
	if len(e.Allow) == 0 {
		return !isSpecial
	}
	for _, r := range e.Allow {
		ok, explicit := r.match(ap, res)
		if !ok {
			continue
		}
		if !isSpecial {
			return true
		}
		// A special address needs an entry that names it: a name resolving there, or an IP or
		// CIDR inside its range (0.0.0.0/0 covers the range but does not name it).
		if explicit && (r.Name != "" || r.Prefix.Bits() >= rng.Bits() && rng.Contains(r.Prefix.Addr())) {
			return true
		}
	}
	return false
}

// PermitsName reports whether the guest's DNS may ask about name (lower case, no final dot):
// with a non-empty Allow a name or wildcard entry must match it, and no deny entry of every
// port may match it.
func (e *Egress) PermitsName(name string) bool {
	for _, r := range e.Deny {
		if r.Lo == 0 && r.MatchName(name) {
			return false
		}
	}
	if len(e.Allow) == 0 {
		return true
	}
	for _, r := range e.Allow {
		if r.MatchName(name) {
			return true
		}
	}
	return false
}

// PermitsTCPDNS reports whether the machine may open a TCP connection to ap, a port-53
// destination: DNS over TCP carries names a datagram check does not see, so it is refused unless
// an allow entry names the address as an IP or CIDR (and it is otherwise permitted).
func (e *Egress) PermitsTCPDNS(ap netip.AddrPort, res Resolver) bool {
	a := ap.Addr().Unmap()
	for _, r := range e.Allow {
		if r.Prefix.IsValid() && r.Prefix.Contains(a) && r.portOK(ap.Port()) {
			return e.Permits(ap, res)
		}
	}
	return false
}

// NetworkMode is how list and info show a machine's network: "off", "on" or "policy".
func NetworkMode(on bool, e *Egress) string {
	switch {
	case !on:
		return "off"
	case e == nil:
		return "on"
	}
	return "policy"
}

// Entries returns the policy as the object it was given in, for display.
func (e *Egress) Entries() map[string][]string {
	out := map[string][]string{"allow": {}, "deny": {}}
	for _, r := range e.Allow {
		out["allow"] = append(out["allow"], r.Text)
	}
	for _, r := range e.Deny {
		out["deny"] = append(out["deny"], r.Text)
	}
	return out
}
