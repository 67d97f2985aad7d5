// Package httpfn serves iii's HTTP-invoked functions (the iii-http-functions engine worker): a
// registerfunction carrying an invocation {url, method, timeout_ms, headers, auth} makes the
// engine call that URL for every invocation of the function, instead of the registering worker.
//
// Security (config.yaml iii-http-functions security:, iii's keys and defaults): url_allowlist
// (host glob patterns, default ["*"]), require_https (default true) and block_private_ips
// (default true: loopback, RFC 1918, carrier-grade NAT, link-local, unique-local, site-local,
// unspecified, reserved, benchmarking, broadcast, documentation and multicast addresses are
// refused; NAT64, IPv4-mapped and IPv4-compatible IPv6 addresses by the IPv4 address they carry). A URL is checked at registration and
// before every call, and the address actually dialled is checked again, so a name that resolves
// elsewhere later (DNS rebinding) cannot reach a blocked address. Redirects are not followed.
//
// A call is a request with the call's data as its JSON body and the headers Content-Type:
// application/json, x-iii-Function-Path, x-iii-Invocation-ID and x-iii-Timestamp (Unix seconds),
// then the invocation's own headers, then its auth: bearer (Authorization: Bearer <token_key>),
// api_key (<header>: <value_key>) or hmac (x-iii-Signature: sha256=<hex HMAC-SHA256 of
// "<timestamp>:<base64 body>" keyed with secret_key>). A *_key names a secret of config.yaml's
// iii-http-functions secrets: (NAME: {env, hosts}), never an environment variable directly: the
// engine's environment holds the user's secrets and any worker, an RBAC session included, may
// register a function, so only what the user granted, for the hosts the user named, is sent.
// Secrets are read from the engine's environment at registration and never logged. Outcomes, with iii's codes: a 2xx body is the
// result (empty: no result; not JSON: invalid_response); 1xx/3xx are a result-less success (a
// JSON body is the result); 4xx/5xx are the body's {"error": {code, message}} or http_error
// "HTTP <status>"; a transport failure or the invocation's timeout (default 30 s) is
// http_request_failed; a URL refused at call time is url_validation_failed.
package httpfn

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// DefaultTimeout is the timeout of a call whose invocation names none (iii's 30000 ms).
const DefaultTimeout = 30 * time.Second

// maxBody bounds the response body read for one call.
const maxBody = 16 << 20

// Security is the security: block of iii-http-functions, with its secrets:.
type Security struct {
	URLAllowlist    []string // host glob patterns (path.Match)
	BlockPrivateIPs bool
	RequireHTTPS    bool
	// Secrets are the only values an auth may name, by name (config.yaml iii-http-functions
	// secrets:). Any worker may register an HTTP-invoked function, so the owner of config.yaml,
	// not the worker, chooses which of the engine's secrets go out, and to which hosts.
	Secrets map[string]Secret
}

// Secret is a value an auth may name: the environment variable holding it and the URL host
// patterns (path.Match) of the only functions it is sent to.
type Secret struct {
	Env   string
	Hosts []string
}

// DefaultSecurity is iii's default: every host, HTTPS only, no private addresses.
func DefaultSecurity() Security {
	return Security{URLAllowlist: []string{"*"}, BlockPrivateIPs: true, RequireHTTPS: true}
}

// Auth is the invocation's auth, as iii's HttpAuthConfig: names of secrets of Security.Secrets.
type Auth struct {
	Type      string `json:"type"` // hmac, bearer or api_key
	SecretKey string `json:"secret_key,omitempty"`
	TokenKey  string `json:"token_key,omitempty"`
	Header    string `json:"header,omitempty"`
	ValueKey  string `json:"value_key,omitempty"`
}

// Invocation is the invocation field of a registerfunction.
type Invocation struct {
	URL       string            `json:"url"`
	Method    string            `json:"method"`
	TimeoutMS *int64            `json:"timeout_ms"`
	Headers   map[string]string `json:"headers"`
	Auth      *Auth             `json:"auth"`
}

// Function is a registered HTTP-invoked function, its secret resolved.
type Function struct {
	ID      string
	URL     string
	Method  string
	Timeout time.Duration
	Headers map[string]string
	auth    *Auth
	secret  string // never logged
}

// Authenticated reports whether calls of f carry one of the engine's secrets.
func (f *Function) Authenticated() bool { return f.auth != nil }

// Invoker registers and calls HTTP-invoked functions under one Security.
type Invoker struct {
	sec    Security
	client *http.Client
	lookup func(string) (string, bool)
}

// New returns an invoker; lookup reads the secrets that auth names (the binary's environment,
// handed down from main; nil: none is set).
func New(sec Security, lookup func(string) (string, bool)) (*Invoker, error) {
	for _, p := range sec.URLAllowlist {
		if _, err := path.Match(p, ""); err != nil {
			return nil, errcode.New(errcode.ConfigInvalid, "iii-http-functions: security.url_allowlist: %q is not a valid pattern: %w", p, err)
		}
	}
	for name, s := range sec.Secrets {
		for _, p := range s.Hosts {
			if _, err := path.Match(p, ""); err != nil {
				return nil, errcode.New(errcode.ConfigInvalid, "iii-http-functions: secrets.%s.hosts: %q is not a valid pattern: %w", name, p, err)
			}
		}
	}
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	inv := &Invoker{sec: sec, lookup: lookup}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: inv.checkDial}
	tr := &http.Transport{DialContext: d.DialContext, Proxy: nil, MaxIdleConnsPerHost: 50,
		TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second}
	inv.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return inv, nil
}

var errPrivate = errors.New("private address blocked")

// checkDial refuses a connection to a blocked address, whatever name led to it.
func (inv *Invoker) checkDial(_, address string, _ syscall.RawConn) error {
	if !inv.sec.BlockPrivateIPs {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || Private(ip) {
		return fmt.Errorf("%w: %s (iii-http-functions security.block_private_ips is true)", errPrivate, host)
	}
	return nil
}

// blocked4 are the IPv4 blocks block_private_ips refuses besides those netip names: this
// network (0/8), carrier-grade NAT (100.64/10, where some clouds serve instance metadata, e.g.
// 100.100.100.200), the IETF protocol block (192.0.0/24), the documentation blocks, benchmarking
// (198.18/15) and the reserved 240/4 with the broadcast address.
var blocked4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// blocked6 are the IPv6 blocks refused whole: deprecated site-local fec0::/10, the IPv4-IPv6
// translated form ::ffff:0:a.b.c.d (SIIT), discard-only 100::/64 and documentation 2001:db8::/32.
var blocked6 = []netip.Prefix{
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// embeds4 are the IPv6 forms whose last 32 bits are an IPv4 address the packet reaches: NAT64
// (64:ff9b::/96 and the local-use 64:ff9b:1::/48) and the deprecated IPv4-compatible ::a.b.c.d.
// Such an address is judged by its IPv4 part, so a NAT64 network cannot carry a request to a
// private IPv4 address.
var embeds4 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::/96"),
}

// Private reports whether ip is an address block_private_ips refuses. IPv4-mapped, NAT64 and
// IPv4-compatible IPv6 addresses are judged by the IPv4 address they carry.
func Private(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		for _, p := range embeds4 {
			if p.Contains(ip) {
				b := ip.As16()
				v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
				if p.Bits() == 96 && p.Addr().IsUnspecified() && (ip.IsUnspecified() || ip.IsLoopback()) {
					return true // :: and ::1 themselves
				}
				return Private(v4)
			}
		}
	}
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
		return true
	}
	blocks := blocked6
	if ip.Is4() {
		if ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return true
		}
		blocks = blocked4
	}
	for _, p := range blocks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckURL checks raw against the security settings; the error says which key refuses it.
func (inv *Invoker) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	if inv.sec.RequireHTTPS && u.Scheme != "https" {
		return fmt.Errorf("%q is not https and iii-http-functions security.require_https is true (set it to false to allow http)", raw)
	}
	host := u.Hostname()
	allowed := false
	for _, p := range inv.sec.URLAllowlist {
		if ok, _ := path.Match(p, host); ok {
			allowed = true
			break
		}
	}
	if !allowed {
		return fmt.Errorf("host %q of %q is not in iii-http-functions security.url_allowlist %q (add a pattern that matches it)", host, raw, inv.sec.URLAllowlist)
	}
	if !inv.sec.BlockPrivateIPs {
		return nil
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return fmt.Errorf("host %q of %q does not resolve: %w", host, raw, err)
		}
	}
	for _, ip := range addrs {
		if Private(ip) {
			return fmt.Errorf("%q reaches private or loopback address %s and iii-http-functions security.block_private_ips is true (set it to false to allow it)", raw, ip)
		}
	}
	return nil
}

// Register parses and checks an invocation for function id. Its error is coded:
// HTTP_INVOCATION_INVALID, HTTP_URL_REFUSED, HTTP_SECRET_REFUSED or HTTP_AUTH_UNRESOLVED.
func (inv *Invoker) Register(ctx context.Context, id string, raw json.RawMessage) (*Function, error) {
	var in Invocation
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: invocation is not {url, method, timeout_ms, headers, auth}: %w", id, err)
	}
	f := &Function{ID: id, URL: in.URL, Method: strings.ToUpper(in.Method), Timeout: DefaultTimeout, Headers: in.Headers, auth: in.Auth}
	switch f.Method {
	case "":
		f.Method = http.MethodPost
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: invocation method %q is not one of GET, POST, PUT, PATCH, DELETE", id, in.Method)
	}
	if in.TimeoutMS != nil {
		if *in.TimeoutMS <= 0 {
			return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: invocation timeout_ms must be positive, got %d", id, *in.TimeoutMS)
		}
		f.Timeout = time.Duration(*in.TimeoutMS) * time.Millisecond
	}
	for k, v := range in.Headers {
		if !validHeader(k, v) {
			return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: invocation header %q is not a valid HTTP header", id, k)
		}
	}
	if err := inv.CheckURL(ctx, in.URL); err != nil {
		return nil, &errcode.Error{Code: errcode.HTTPURLRefused, Message: fmt.Sprintf("function %s: %v", id, err), Err: err}
	}
	if a := in.Auth; a != nil {
		var key string
		switch a.Type {
		case "hmac":
			key = a.SecretKey
		case "bearer":
			key = a.TokenKey
		case "api_key":
			key = a.ValueKey
			if !validHeader(a.Header, "") {
				return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: auth api_key header %q is not a valid HTTP header name", id, a.Header)
			}
		default:
			return nil, errcode.New(errcode.HTTPInvocationInvalid, "function %s: auth type %q is not one of hmac, bearer, api_key", id, a.Type)
		}
		v, err := inv.secret(id, a.Type, key, in.URL)
		if err != nil {
			return nil, err
		}
		f.secret = v
	}
	return f, nil
}

// secret resolves the secret an auth names for a function of URL raw: it must be one config.yaml
// grants (HTTP_SECRET_REFUSED), for a host of raw its hosts match (HTTP_SECRET_REFUSED), and
// its variable must be set (HTTP_AUTH_UNRESOLVED). Messages name the key, never the value.
func (inv *Invoker) secret(id, authType, key, raw string) (string, error) {
	s, ok := inv.sec.Secrets[key]
	if key == "" || !ok {
		return "", errcode.New(errcode.HTTPSecretRefused, "function %s: the %s auth names secret %q, which iii-http-functions secrets: in config.yaml does not grant; "+
			"an auth may name only a secret listed there, with the hosts it may be sent to", id, authType, key)
	}
	host := ""
	if u, err := url.Parse(raw); err == nil {
		host = u.Hostname()
	}
	allowed := false
	for _, p := range s.Hosts {
		if ok, _ := path.Match(p, host); ok && host != "" {
			allowed = true
			break
		}
	}
	if !allowed {
		return "", errcode.New(errcode.HTTPSecretRefused, "function %s: secret %q may be sent only to hosts %q (iii-http-functions secrets.%s.hosts), not to %q", id, key, s.Hosts, key, host)
	}
	v, ok := inv.lookup(s.Env)
	if !ok {
		return "", errcode.New(errcode.HTTPAuthUnresolved, "function %s: the %s auth names secret %q, whose environment variable %q is not set in the engine's environment", id, authType, key, s.Env)
	}
	return v, nil
}

func validHeader(k, v string) bool {
	if k == "" || strings.ContainsAny(k, " \t\r\n:") || strings.ContainsAny(v, "\r\n") {
		return false
	}
	for _, c := range k {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func perr(code, format string, args ...any) *protocol.Error {
	return protocol.NewError(code, format, args...)
}

// Call invokes f with data (JSON) and returns its result (nil: none).
func (inv *Invoker) Call(ctx context.Context, f *Function, invocationID string, data json.RawMessage) (json.RawMessage, *protocol.Error) {
	if err := inv.CheckURL(ctx, f.URL); err != nil {
		return nil, perr("url_validation_failed", "%v", err)
	}
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, f.Method, f.URL, bytes.NewReader(data))
	if err != nil {
		return nil, perr("http_request_failed", "%v", err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-iii-Function-Path", f.ID)
	req.Header.Set("x-iii-Invocation-ID", invocationID)
	req.Header.Set("x-iii-Timestamp", ts)
	for k, v := range f.Headers {
		req.Header.Set(k, v)
	}
	if f.auth != nil {
		switch f.auth.Type {
		case "hmac":
			req.Header.Set("x-iii-Signature", Sign(data, f.secret, ts))
		case "bearer":
			req.Header.Set("Authorization", "Bearer "+f.secret)
		case "api_key":
			req.Header.Set(f.auth.Header, f.secret)
		}
	}
	resp, err := inv.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, perr("http_request_failed", "%s %s: no answer within %dms (the invocation's timeout_ms)", f.Method, f.URL, f.Timeout.Milliseconds())
		}
		return nil, perr("http_request_failed", "%s %s: %v", f.Method, f.URL, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, perr("http_response_failed", "%s %s: reading the response: %v", f.Method, f.URL, err)
	}
	if len(body) > maxBody {
		return nil, perr("http_response_failed", "%s %s: the response is larger than %d MiB", f.Method, f.URL, maxBody>>20)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, nil
		}
		if !json.Valid(body) {
			return nil, perr("invalid_response", "%s %s answered %d with a body that is not JSON", f.Method, f.URL, resp.StatusCode)
		}
		return body, nil
	case resp.StatusCode < 400:
		if json.Valid(body) {
			return body, nil
		}
		return nil, nil
	}
	var env struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil {
		code, msg := "http_error", "HTTP request failed"
		if env.Error.Code != nil {
			code = *env.Error.Code
		}
		if env.Error.Message != nil {
			msg = *env.Error.Message
		}
		return nil, &protocol.Error{Code: code, Message: msg}
	}
	return nil, perr("http_error", "HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Sign is iii's HMAC signature of a request: sha256=<hex HMAC-SHA256 over
// "<timestamp>:<base64 body>">.
func Sign(body []byte, secret, timestamp string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp + ":" + base64.StdEncoding.EncodeToString(body)))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
