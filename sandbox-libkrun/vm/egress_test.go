package vm

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEgressRule(t *testing.T) {
	good := map[string]EgressRule{
		"api.example.com":      {Name: "api.example.com"},
		"API.Example.com.":     {Name: "api.example.com"},
		"*.example.com":        {Name: "*.example.com"},
		"*.example.com:443":    {Name: "*.example.com", Lo: 443, Hi: 443},
		"192.0.2.2":            {Prefix: netip.MustParsePrefix("192.0.2.2/32")},
		"192.0.2.2:8000-8100":  {Prefix: netip.MustParsePrefix("192.0.2.2/32"), Lo: 8000, Hi: 8100},
		"2001:db8::1":          {Prefix: netip.MustParsePrefix("2001:db8::1/128")},
		"[2001:db8::1]:443":    {Prefix: netip.MustParsePrefix("2001:db8::1/128"), Lo: 443, Hi: 443},
		"[2001:db8::/32]:1-2":  {Prefix: netip.MustParsePrefix("2001:db8::/32"), Lo: 1, Hi: 2},
		"10.0.0.0/8":           {Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		"::ffff:10.0.0.0/104":  {Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		":443":                 {Lo: 443, Hi: 443},
		"*:80-81":              {Lo: 80, Hi: 81},
		"svc_x.internal:65535": {Name: "svc_x.internal", Lo: 65535, Hi: 65535},
	}
	for in, want := range good {
		got, err := ParseEgressRule(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		want.Text = in
		if got != want {
			t.Errorf("%q: got %+v, want %+v", in, got, want)
		}
	}
	for _, in := range []string{"", "*", "*:", ":", ":0", ":65536", "host:", "host:x", "a:5-4", "10.0.0.1/8", "10.0.0.0/33",
		"1.2.3", "1.2.3.4.5", "2001:db8::1:443x", "[2001:db8::1", "[192.0.2.1]:80", "[::1]x", "ex ample.com", "*.*.com",
		"-a.com", "a..com", "foo.123", "a*.com", "fe80::1%eth0", "[2001:db8::1]:", strings.Repeat("a", 64) + ".com"} {
		if r, err := ParseEgressRule(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, r)
		} else if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("%q: error does not name the entry: %v", in, err)
		}
	}
}

func TestParseNetwork(t *testing.T) {
	for in, want := range map[string]string{`false`: "off", `"off"`: "off", `null`: "off", `true`: "on", `"on"`: "on",
		`{"allow":["a.com"]}`: "policy", `{}`: "policy", `{"deny":null}`: "policy"} {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatal(err)
		}
		on, e, err := ParseNetwork("network", v)
		if err != nil || NetworkMode(on, e) != want {
			t.Errorf("%s: %v %v %v, want %s", in, on, e, err, want)
		}
	}
	for in, want := range map[string]string{
		`"yes"`:                            `network: "yes" is not a network mode`,
		`1`:                                `network: must be`,
		`{"allow":["a.com"],"x":1}`:        `network.x: unknown key`,
		`{"allow":"a.com"}`:                `network.allow: must be a list`,
		`{"deny":[3]}`:                     `network.deny[0]: an entry must be a string`,
		`{"allow":["ok.com","bad entry"]}`: `network.allow[1]: entry "bad entry"`,
	} {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseNetwork("network", v); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %s...", in, err, want)
		}
	}
}

// fakeResolver answers name rules from a fixed table; a wildcard stands for the listed names
// under it (what the guest looked up).
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) Addrs(r EgressRule) []netip.Addr {
	var out []netip.Addr
	for n, as := range f {
		if r.MatchName(n) {
			out = append(out, as...)
		}
	}
	return out
}

func policy(t *testing.T, allow, deny []string) *Egress {
	t.Helper()
	e := &Egress{}
	for _, s := range allow {
		r, err := ParseEgressRule(s)
		if err != nil {
			t.Fatal(err)
		}
		e.Allow = append(e.Allow, r)
	}
	for _, s := range deny {
		r, err := ParseEgressRule(s)
		if err != nil {
			t.Fatal(err)
		}
		e.Deny = append(e.Deny, r)
	}
	return e
}

func TestEgressPermits(t *testing.T) {
	res := fakeResolver{
		"api.example.com":   {netip.MustParseAddr("203.0.113.10")},
		"intra.example.com": {netip.MustParseAddr("10.1.2.3")},
		"cdn.example.net":   {netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")},
		"bad.example.net":   {netip.MustParseAddr("198.51.100.66")},
	}
	type c struct {
		ap   string
		want bool
	}
	cases := []struct {
		name        string
		allow, deny []string
		checks      []c
	}{
		{"empty allow: public passes, every special range refused", nil, nil, []c{
			{"203.0.113.1:443", true}, {"[2001:db8::1]:80", true}, {"192.0.2.2:8080", true},
			{"10.0.0.1:80", false}, {"172.16.5.5:80", false}, {"172.31.255.255:80", false}, {"172.32.0.1:80", true},
			{"192.168.1.1:80", false}, {"100.64.0.1:80", false}, {"100.128.0.1:80", true},
			{"169.254.169.254:80", false}, {"0.1.2.3:80", false}, {"224.0.0.251:5353", false}, {"255.255.255.255:67", false},
			{"[fc00::1]:80", false}, {"[fd12::1]:80", false}, {"[fe80::1]:80", false}, {"[ff02::1]:80", false},
			{"[::ffff:10.0.0.1]:80", false}, {"[::ffff:203.0.113.1]:80", true}, {"[::10.0.0.1]:80", false},
		}},
		{"allow list: only what it names", []string{"192.0.2.2:8080", "[2001:db8::/32]:443"}, nil, []c{
			{"192.0.2.2:8080", true}, {"192.0.2.2:8081", false}, {"192.0.2.3:8080", false},
			{"[2001:db8::5]:443", true}, {"[2001:db8::5]:80", false}, {"203.0.113.1:443", false},
		}},
		{"port range and bare ports", []string{"*:80-81", ":443"}, nil, []c{
			{"203.0.113.1:80", true}, {"203.0.113.1:81", true}, {"203.0.113.1:82", false}, {"198.51.100.1:443", true},
			{"10.0.0.1:443", false}, // a port entry names no private address
		}},
		{"a special range needs an entry inside it", []string{"10.0.0.0/8", "0.0.0.0/0", "169.254.169.254:80"}, nil, []c{
			{"10.9.9.9:22", true}, {"192.168.0.1:22", false}, {"203.0.113.1:22", true},
			{"169.254.169.254:80", true}, {"169.254.169.254:81", false}, {"169.254.0.1:80", false},
		}},
		{"a CIDR wider than the range does not name it", []string{"8.0.0.0/6"}, nil, []c{{"10.0.0.1:1", false}, {"9.0.0.1:1", true}}},
		{"deny wins over allow", []string{"203.0.113.0/24", "cdn.example.net"}, []string{"203.0.113.66", "198.51.100.7:443", "bad.example.net"}, []c{
			{"203.0.113.1:443", true}, {"203.0.113.66:443", false}, {"198.51.100.7:80", true}, {"198.51.100.7:443", false},
			{"[2001:db8::7]:443", true},
		}},
		{"deny without allow", nil, []string{"bad.example.net", "203.0.113.0/24:25"}, []c{
			{"198.51.100.66:443", false}, {"198.51.100.67:443", true}, {"203.0.113.1:25", false}, {"203.0.113.1:26", true},
		}},
		{"names through the resolver, a private answer named explicitly", []string{"api.example.com:443", "intra.example.com"}, nil, []c{
			{"203.0.113.10:443", true}, {"203.0.113.10:80", false}, {"10.1.2.3:5432", true}, {"10.1.2.4:5432", false},
		}},
		{"wildcards: names under the domain, not the domain", []string{"*.example.net"}, nil, []c{
			{"198.51.100.7:443", true}, {"198.51.100.66:443", true}, {"203.0.113.10:443", false},
		}},
	}
	for _, tc := range cases {
		e := policy(t, tc.allow, tc.deny)
		for _, ck := range tc.checks {
			if got := e.Permits(netip.MustParseAddrPort(ck.ap), res); got != ck.want {
				t.Errorf("%s: %s permitted %v, want %v", tc.name, ck.ap, got, ck.want)
			}
		}
	}
}

func TestEgressPermitsName(t *testing.T) {
	e := policy(t, []string{"api.example.com:443", "*.example.net", "192.0.2.2:80"}, []string{"bad.example.net", "mail.example.net:25"})
	for name, want := range map[string]bool{
		"api.example.com": true, "www.example.com": false, "example.net": false, "cdn.example.net": true,
		"a.b.example.net": true, "bad.example.net": false, "mail.example.net": true, "xexample.net": false, "2.2.0.192.in-addr.arpa": false,
	} {
		if got := e.PermitsName(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if !policy(t, nil, []string{"bad.com"}).PermitsName("good.com") || policy(t, nil, []string{"bad.com"}).PermitsName("bad.com") {
		t.Error("a deny-only policy answers every name but the denied")
	}
	if policy(t, []string{"192.0.2.2"}, nil).PermitsName("example.com") {
		t.Error("an allow list of addresses only answers no name")
	}
}

func TestEgressTCPDNS(t *testing.T) {
	e := policy(t, []string{"*.example.com", "198.51.100.53", "9.9.9.0/24:53"}, []string{"9.9.9.9"})
	for ap, want := range map[string]bool{"198.51.100.53:53": true, "9.9.9.10:53": true, "9.9.9.9:53": false, "203.0.113.53:53": false} {
		if got := e.PermitsTCPDNS(netip.MustParseAddrPort(ap), nil); got != want {
			t.Errorf("%s: %v, want %v", ap, got, want)
		}
	}
}

// FuzzParseEgressRule: no entry panics the parser, and an accepted one is of exactly one form
// with a sane port range.
func FuzzParseEgressRule(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "*.example.com", "[2001:db8::/32]:1-2", "10.0.0.0/8", ":443", "*:80-81", "::ffff:10.0.0.0/104"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseEgressRule(s)
		if err != nil {
			return
		}
		forms := 0
		if r.Name != "" {
			forms++
		}
		if r.Prefix.IsValid() {
			forms++
			if r.Prefix.Addr().Is4In6() || r.Prefix != r.Prefix.Masked() {
				t.Fatalf("%q: prefix %v", s, r.Prefix)
			}
		}
		if forms > 1 || forms == 0 && r.Lo == 0 || r.Lo > r.Hi || (r.Lo == 0) != (r.Hi == 0) {
			t.Fatalf("%q: parsed as %+v", s, r)
		}
	})
}
