package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// exposeTarget is the most an HTTP request through an exposed port may take against the same
// request to the same server on the host.
const exposeTarget = 2.0

// exposeBody is the tiny static file both servers serve.
const exposeBody = "hello from a static file\n"

// exposeSection measures an HTTP GET of a tiny static file from python's http.server in a
// sandbox through its exposed URL against the same GET from python's http.server on the host
// (the same program and file; a new connection per request, as http.server answers HTTP/1.0).
func exposeSection(ctx context.Context, d *qemu.Driver, n int) {
	cache := image.NewCache("")
	if _, ok := cache.RootFS(debimage.Presets[0].Ref); !ok {
		fmt.Printf("expose: skipped, image %s not cached (go tool mage images)\n", debimage.Presets[0].Ref)
		return
	}
	if _, err := exec.LookPath("python3"); err != nil {
		fmt.Println("expose: skipped, no python3 on the host to serve the same file")
		return
	}
	exitOn("bench: expose:", measureExpose(ctx, d, n, cache))
}

// measureExpose starts the host's server and a python sandbox serving the same file behind its
// exposed port, waits until both serve, and prints the GETs of each (compareGets) and the same
// GET made inside the guest (inGuestGet).
func measureExpose(ctx context.Context, d *qemu.Driver, n int, cache *image.Cache) error {
	hostURL, stopHost, err := startHostServer()
	if err != nil {
		return err
	}
	defer stopHost()
	st := settings.Defaults()
	st.AutoInstall = false
	st.ImageAllowlist = []string{"python"}
	s, err := startStack(ctx, d, st, cache)
	if err != nil {
		return err
	}
	defer s.close()
	g, err := createExposeSandbox(ctx, s)
	if err != nil {
		return err
	}
	defer g.stop()
	guestURL, err := g.serveExposed()
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	if err := waitServing(client, hostURL, guestURL); err != nil {
		return err
	}
	hm, gm, err := compareGets(client, hostURL, guestURL, max(n, 10))
	if err != nil {
		return err
	}
	return g.inGuestGet(hm, gm, max(n, 10))
}

// startHostServer serves exposeBody as f.txt from python's http.server on a free loopback port
// of the host, from a temporary directory. It returns the file's URL and what stops the server
// and removes the directory.
func startHostServer() (string, func(), error) {
	dir, err := os.MkdirTemp("", "iii-bench-www-")
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(exposeBody), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command("python3", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1", "--directory", dir)
	if err := srv.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("host http.server: %w", err)
	}
	stop := func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		os.RemoveAll(dir)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/f.txt", port), stop, nil
}

// exposeSandbox is the python sandbox of the expose section, created through the stack's client.
type exposeSandbox struct {
	ctx context.Context
	s   *stack
	id  string
}

// createExposeSandbox creates a python sandbox; the caller stops it.
func createExposeSandbox(ctx context.Context, s *stack) (*exposeSandbox, error) {
	g := &exposeSandbox{ctx: ctx, s: s}
	raw, err := g.call("sandbox::create", map[string]any{"image": "python"})
	if err != nil {
		return nil, err
	}
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	if err := json.Unmarshal(raw, &created); err != nil {
		return nil, err
	}
	g.id = created.SandboxID
	return g, nil
}

// call calls fn with req through the stack's client, its error naming fn.
func (g *exposeSandbox) call(fn string, req map[string]any) (json.RawMessage, error) {
	raw, err := g.s.client.Call(g.ctx, fn, req, protocol.WithTimeout(processReplyWait))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	return raw, nil
}

// stop stops the sandbox and waits for its end, whatever the section's context has become.
func (g *exposeSandbox) stop() {
	_, _ = g.s.client.Call(context.Background(), "sandbox::stop", map[string]any{"sandbox_id": g.id, "wait": true}, protocol.WithTimeout(time.Minute))
}

// serveExposed writes exposeBody to /tmp/www/f.txt in the sandbox, serves that directory from
// python's http.server on the guest's port 8000, detached, and exposes the port. It returns the
// file's URL through the exposed port.
func (g *exposeSandbox) serveExposed() (string, error) {
	if _, err := g.call("sandbox::exec", map[string]any{"sandbox_id": g.id, "argv": []string{"sh", "-c", "mkdir -p /tmp/www && printf '" + exposeBody[:len(exposeBody)-1] + "\\n' > /tmp/www/f.txt"}}); err != nil {
		return "", err
	}
	if _, err := g.call("sandbox::process::start", map[string]any{"sandbox_id": g.id, "detached": true,
		"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/tmp/www"}}); err != nil {
		return "", err
	}
	raw, err := g.call("sandbox::expose", map[string]any{"sandbox_id": g.id, "port": 8000})
	if err != nil {
		return "", err
	}
	var exposed struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(raw, &exposed); err != nil {
		return "", err
	}
	return exposed.URL + "f.txt", nil
}

// timedGet is the time of a GET of url with client until its whole body came, checked to be
// exposeBody.
func timedGet(client *http.Client, url string) (time.Duration, error) {
	t0 := time.Now()
	res, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	el := time.Since(t0)
	if err != nil || res.StatusCode != 200 || string(b) != exposeBody {
		return 0, fmt.Errorf("GET %s: %d %q %w", url, res.StatusCode, b, err)
	}
	return el, nil
}

// waitServing GETs each of urls until it serves (2 minutes at most each): that GET is also its
// warm-up request, so that no timed one pays a first translation.
func waitServing(client *http.Client, urls ...string) error {
	for _, url := range urls {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := timedGet(client, url); err == nil {
				break
			} else if time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// compareGets GETs hostURL then guestURL, runs times, and prints the medians with the target of
// the exposed port; it returns the exposed port's median.
func compareGets(client *http.Client, hostURL, guestURL string, runs int) (hm, gm time.Duration, err error) {
	var hostT, guestT []time.Duration
	for i := 0; i < runs; i++ {
		h, err := timedGet(client, hostURL)
		if err != nil {
			return 0, 0, err
		}
		g, err := timedGet(client, guestURL)
		if err != nil {
			return 0, 0, err
		}
		hostT, guestT = append(hostT, h), append(guestT, g)
	}
	hm, gm = median(hostT), median(guestT)
	ratio := float64(gm) / float64(hm)
	fmt.Printf("%-44s %s (median of %d)\n", "expose: GET of a tiny file, host http.server:", hm.Round(time.Microsecond), len(hostT))
	fmt.Printf("%-44s %s; %.2fx the host's: %s (<= %.1fx)\n", "expose: the same through an exposed port:", gm.Round(time.Microsecond), ratio,
		meets(ratio <= exposeTarget), exposeTarget)
	return hm, gm, nil
}

// inGuestGet makes the same GET inside the guest, runs times from python on its loopback
// (guestGetScript), and prints its median against gm, the exposed port's: what the guest's
// server takes under this accelerator, which the relay adds to. Against hm, the host's, it is
// the bound of the target: no relay can make the exposed GET faster than the guest serves it.
func (g *exposeSandbox) inGuestGet(hm, gm time.Duration, runs int) error {
	raw, err := g.call("sandbox::exec", map[string]any{"sandbox_id": g.id, "argv": []string{"python3", "-c", guestGetScript(runs)}})
	if err != nil {
		return err
	}
	var res struct {
		Stdout   string `json:"stdout"`
		ExitCode *int   `json:"exit_code"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		return fmt.Errorf("the in-guest GET: %s %w", raw, err)
	}
	us, err := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
	if err != nil {
		return fmt.Errorf("the in-guest GET printed %q", res.Stdout)
	}
	inGuest := time.Duration(us * float64(time.Microsecond))
	fmt.Printf("%-44s %s; the relay adds %s (%.2fx)\n", "expose: the same GET inside the guest:", inGuest.Round(time.Microsecond),
		(gm - inGuest).Round(time.Microsecond), float64(gm)/float64(inGuest))
	bound := float64(inGuest) / float64(hm)
	note := "the target is within this machine's reach"
	if bound > exposeTarget {
		note = fmt.Sprintf("the target (%.1fx) cannot be met on this machine: the guest alone serves it %.2fx slower than the host", exposeTarget, bound)
	}
	fmt.Printf("%-44s %.2fx the host's (%s)\n", "bound: the GET inside the guest:", bound, note)
	return nil
}

// guestGetScript prints the median in microseconds of n GETs of f.txt from the guest's own
// server, each on a new connection. The client is a bare socket, not http.client: under TCG a
// python HTTP client's own work would be counted as the server's and hide the relay's share.
func guestGetScript(n int) string {
	return `import socket, time, statistics
req = b"GET /f.txt HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
ts = []
for i in range(` + strconv.Itoa(n+1) + `):
    t0 = time.perf_counter()
    c = socket.create_connection(("127.0.0.1", 8000))
    c.sendall(req)
    while c.recv(65536):
        pass
    c.close()
    ts.append(time.perf_counter() - t0)
print(statistics.median(ts[1:]) * 1e6)`
}
