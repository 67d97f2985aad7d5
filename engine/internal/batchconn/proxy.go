package batchconn

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// proxyFor picks the HTTP proxy for a request, as net/http does: from HTTP_PROXY, HTTPS_PROXY
// and NO_PROXY (never for localhost or a loopback address). A variable so tests can set one.
var proxyFor = http.ProxyFromEnvironment

// netDial returns how Dial reaches the host of target (a ws:// or wss:// URL): straight, or
// through a CONNECT tunnel of the HTTP proxy the environment names for it, so that a client
// behind a proxy reaches a remote engine as it did before the SDK read its own frames.
func netDial(target *url.URL) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	probe := *target
	probe.Scheme = map[string]string{"ws": "http", "wss": "https"}[target.Scheme]
	proxy, err := proxyFor(&http.Request{URL: &probe})
	if err != nil {
		return nil, fmt.Errorf("the proxy for %s: %w", target.Redacted(), err)
	}
	var d net.Dialer
	if proxy == nil {
		return d.DialContext, nil
	}
	if proxy.Scheme != "http" {
		return nil, fmt.Errorf("the proxy for %s is %s: only http:// proxies are supported for WebSocket connections; "+
			"add the engine's host to NO_PROXY to connect directly", target.Redacted(), proxy.Redacted())
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialConnect(ctx, &d, proxy, network, addr)
	}, nil
}

// dialConnect opens a tunnel to addr through the HTTP proxy with a CONNECT request.
func dialConnect(ctx context.Context, d *net.Dialer, proxy *url.URL, network, addr string) (net.Conn, error) {
	host := proxy.Host
	if proxy.Port() == "" {
		host = net.JoinHostPort(proxy.Hostname(), "80")
	}
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, fmt.Errorf("connecting to the proxy %s: %w", proxy.Redacted(), err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if u := proxy.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	br := bufio.NewReader(c)
	err = req.Write(c)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("CONNECT %s through the proxy %s: %w", addr, proxy.Redacted(), err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = c.Close()
		return nil, fmt.Errorf("the proxy %s refused CONNECT %s: %s", proxy.Redacted(), addr, strings.TrimSpace(resp.Status))
	}
	_ = c.SetDeadline(time.Time{})
	return withPending(c, br), nil
}
