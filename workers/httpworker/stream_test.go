package httpworker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// handler is a fake route function that gets the request with its channel refs.
type handler func(ctx context.Context, req streamReq) (any, error)

type streamReq struct {
	Body        any                 `json:"body"`
	RequestBody protocol.ChannelRef `json:"request_body"`
	Response    protocol.ChannelRef `json:"response"`
}

type streamEnv struct {
	ts   *httptest.Server
	url  string // the engine's
	e    *core.Engine
	s    *Server
	w    *protocol.Worker
	pool *ChannelPool
}

// streamServer runs an engine in the process and the http worker on it, its routes (GET or
// POST /<name>) served by hs.
func streamServer(t *testing.T, cfg Config, hs map[string]handler) *streamEnv {
	return startStreamServer(t, cfg, hs)
}

func streamServerB(b *testing.B, hs map[string]handler) *streamEnv {
	return startStreamServer(b, Defaults(), hs)
}

func startStreamServer(t testing.TB, cfg Config, hs map[string]handler) *streamEnv {
	t.Helper()
	t.Setenv(protocol.EnvTokenFile, "")
	t.Setenv(protocol.EnvToken, "")
	e := core.New(core.Options{})
	url := enginetest.Start(t, e).URL
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "http", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context, _ protocol.Trigger, fn string, payload any, timeout time.Duration) (json.RawMessage, error) {
		h, ok := hs[fn]
		if !ok {
			return nil, protocol.NewError("function_not_found", "%s", fn)
		}
		b, _ := json.Marshal(payload)
		var req streamReq
		_ = json.Unmarshal(b, &req)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := h(ctx, req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
	s := New(cfg, call, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pool := NewChannelPool(w, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetChannels(pool)
	for name := range hs {
		for _, m := range []string{"GET", "POST"} {
			c := fmt.Sprintf(`{"api_path":"/%s","http_method":%q}`, name, m)
			if err := s.RegisterTrigger(context.Background(), protocol.Trigger{ID: name + m, FunctionID: name, Config: json.RawMessage(c)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pool.Close(ctx); err != nil {
			t.Errorf("closing the channel pool: %v", err)
		}
		_ = w.Close()
	})
	return &streamEnv{ts: ts, url: url, e: e, s: s, w: w, pool: pool}
}

func write(t *testing.T, w *protocol.ChannelWriter, s string) error {
	_, err := w.Write([]byte(s))
	return err
}

// sse is a handler that sends status, headers and n events, each once next lets it.
func sse(url string, n int, next <-chan struct{}) handler {
	return func(ctx context.Context, req streamReq) (any, error) {
		w, err := protocol.DialWriter(ctx, url, req.Response)
		if err != nil {
			return nil, err
		}
		_ = w.SendMessage(`{"type":"set_status","status_code":201}`)
		_ = w.SendMessage(`{"type":"set_headers","headers":{"content-type":"text/event-stream","x-run":"1"}}`)
		for i := range n {
			if i > 0 { // the first event goes at once: the headers reach the client with it
				select {
				case <-next:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if _, err := w.Write([]byte(fmt.Sprintf("data: %d\n\n", i))); err != nil {
				return nil, err
			}
		}
		return nil, w.Close()
	}
}

// A handler that streams: set_status and set_headers before the first byte, then each binary
// frame reaches the client as it is sent (the next is sent only once the client has read the
// previous one), and the end of the channel ends the response.
func TestStreamedResponse(t *testing.T) {
	next := make(chan struct{})
	env := &streamEnv{}
	env = streamServer(t, Defaults(), map[string]handler{"events": func(ctx context.Context, req streamReq) (any, error) {
		return sse(env.url, 3, next)(ctx, req)
	}})
	res, err := http.Get(env.ts.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 201 || res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("X-Run") != "1" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	br := bufio.NewReader(res.Body)
	for i := range 3 {
		if i > 0 {
			next <- struct{}{}
		}
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		_, _ = br.ReadString('\n')
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the events: %q %v", rest, err)
	}
}

// A body over InlineBodyBytes that is not JSON streams into request_body (body is null); a
// small one is also the body's text, and a JSON one its value; the handler's normal answer is
// the response.
func TestStreamedRequestBody(t *testing.T) {
	cfg := Defaults()
	cfg.MaxBodyBytes = 8 << 20
	env := &streamEnv{}
	env = streamServer(t, cfg, map[string]handler{"upload": func(ctx context.Context, req streamReq) (any, error) {
		r, err := protocol.DialReader(ctx, env.url, req.RequestBody)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		h := sha256.New()
		n, err := io.Copy(h, r)
		if err != nil {
			return nil, err
		}
		return map[string]any{"status_code": 200, "body": map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil)), "body": req.Body}}, nil
	}})
	big := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
	sum := sha256.Sum256(big)
	for _, c := range []struct {
		name, ctype string
		body        []byte
		want        any
	}{
		{"5 MiB", "application/octet-stream", big, nil},
		{"small text", "text/plain", []byte("hello"), "hello"},
		{"json", "application/json", []byte(`{"a":1}`), map[string]any{"a": float64(1)}},
	} {
		res, err := http.Post(env.ts.URL+"/upload", c.ctype, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Bytes  int64  `json:"bytes"`
			SHA256 string `json:"sha256"`
			Body   any    `json:"body"`
		}
		err = json.NewDecoder(res.Body).Decode(&got)
		res.Body.Close()
		want := sha256.Sum256(c.body)
		if c.name == "5 MiB" {
			want = sum
		}
		if err != nil || res.StatusCode != 200 || got.Bytes != int64(len(c.body)) || got.SHA256 != hex.EncodeToString(want[:]) || fmt.Sprint(got.Body) != fmt.Sprint(c.want) {
			t.Errorf("%s: %d %+v %v", c.name, res.StatusCode, got, err)
		}
	}
	// Over max_body_bytes while streaming: 413, and the handler's stream is aborted.
	cfg.MaxBodyBytes = 1 << 20
	env.s.cfg.MaxBodyBytes = cfg.MaxBodyBytes
	res, err := http.Post(env.ts.URL+"/upload", "application/octet-stream", bytes.NewReader(big))
	if err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 413 {
			t.Errorf("over max_body_bytes: %d %s", res.StatusCode, b)
		}
	}
}

// The failures of a streamed response each end the request, and nothing is left behind: no
// goroutine, no channel in the engine.
func TestStreamFailuresLeakNothing(t *testing.T) {
	cfg := Defaults()
	cfg.DefaultTimeoutMS = 500
	env := &streamEnv{}
	left := make(chan error, 1)
	gotPart := make(chan struct{})
	env = streamServer(t, cfg, map[string]handler{
		// fails after its first chunk
		"midfail": func(ctx context.Context, req streamReq) (any, error) {
			w, err := protocol.DialWriter(ctx, env.url, req.Response)
			if err != nil {
				return nil, err
			}
			_ = write(t, w, "part")
			<-gotPart // the client has the first chunk: the failure comes mid-stream
			return nil, protocol.NewError("DISK_FULL", "disk full")
		},
		// writes until its writes fail (the client left)
		"forever": func(ctx context.Context, req streamReq) (any, error) {
			w, err := protocol.DialWriter(context.Background(), env.url, req.Response)
			if err != nil {
				return nil, err
			}
			for {
				if err := write(t, w, "tick\n"); err != nil {
					left <- err
					return nil, err
				}
				time.Sleep(10 * time.Millisecond)
			}
		},
		// answers null and never writes its response
		"silent": func(context.Context, streamReq) (any, error) { return nil, nil },
		// answers normally and ignores both channels
		"plain": func(context.Context, streamReq) (any, error) { return map[string]any{"body": "ok"}, nil },
		// aborts its response before a byte
		"abort": func(ctx context.Context, req streamReq) (any, error) {
			w, err := protocol.DialWriter(ctx, env.url, req.Response)
			if err != nil {
				return nil, err
			}
			_ = w.Abort("gave up")
			return nil, nil
		},
	})
	base := runtime.NumGoroutine()

	res, err := http.Get(env.ts.URL + "/midfail")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, err = io.ReadFull(res.Body, b)
	close(gotPart)
	rest, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "part" || len(rest) != 0 || err == nil {
		t.Errorf("a handler failing mid-stream: %d %q %v, want 200, part, then a cut connection", res.StatusCode, b, err)
	}

	res, err = http.Get(env.ts.URL + "/forever")
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); line != "tick\n" {
		t.Fatalf("forever: %q %v", line, err)
	}
	res.Body.Close()
	select {
	case err := <-left:
		t.Logf("after the client left, the handler's write failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's writes still succeed 10 s after the client left")
	}

	for _, c := range []struct {
		path   string
		status int
		want   string
	}{{"/silent", 504, CodeResponseTimeout}, {"/plain", 200, "ok"}, {"/abort", 502, CodeResponseAborted}} {
		res, body := do(t, "GET", env.ts.URL+c.path, "", nil)
		if res.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d %s", c.path, res.StatusCode, body, c.status, c.want)
		}
	}

	// A client that leaves before the first byte.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", env.ts.URL+"/silent", nil)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: %v", err)
	}

	http.DefaultClient.CloseIdleConnections()
	// The requests' own channels are gone; what is left is the pool's, which its Close removes.
	enginetest.Eventually(t, "the engine to forget the requests' channels", 10*time.Second, func() bool { return env.e.ChannelCount() == env.pool.Held() })
	if held := env.pool.Held(); held == 0 || held > PoolChannels {
		t.Errorf("the pool holds %d channels, want 1 to %d", held, PoolChannels)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.pool.Close(ctx); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the engine to forget every channel", 10*time.Second, func() bool { return env.e.ChannelCount() == 0 })
	if !enginetest.Poll(10*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before the requests:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("goroutines: %d before, %d after; channels: %d", base, runtime.NumGoroutine(), env.e.ChannelCount())
}

// The cost of the channels on a request whose handler answers normally: none; unpooled (two
// engine::channels::create calls before the call, two removals after the answer); pooled (the
// channels made ahead, many a call, and removed in batches).
func BenchmarkPlainRequest(b *testing.B) {
	for _, channels := range []string{"none", "unpooled", "pooled"} {
		b.Run("channels="+channels, func(b *testing.B) {
			env := streamServerB(b, map[string]handler{"plain": func(context.Context, streamReq) (any, error) { return map[string]any{"body": "ok"}, nil }})
			switch channels {
			case "none":
				env.s.SetChannels(nil)
			case "unpooled":
				env.s.SetChannels(WorkerChannels(env.w))
			}
			for b.Loop() {
				res, err := http.Get(env.ts.URL + "/plain")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
}

// A stream outlasts default_timeout once its first byte is out: the call's timeout is no failure
// then, and the stream ends with its channel.
func TestStreamOutlastsTimeout(t *testing.T) {
	cfg := Defaults()
	cfg.DefaultTimeoutMS = 200
	env := &streamEnv{}
	timedOut := make(chan struct{})
	env = streamServer(t, cfg, map[string]handler{"long": func(ctx context.Context, req streamReq) (any, error) {
		w, err := protocol.DialWriter(context.Background(), env.url, req.Response)
		if err != nil {
			return nil, err
		}
		_ = write(t, w, "first\n")
		go func() {
			<-timedOut // the call has timed out: the stream goes on
			_ = write(t, w, "after the timeout\n")
			_ = w.Close()
		}()
		<-ctx.Done()
		close(timedOut)
		return nil, protocol.NewError(errcode.ClientTimeout, "invocation timed out after 200ms")
	}})
	res, body := do(t, "GET", env.ts.URL+"/long", "", nil)
	if res.StatusCode != 200 || body != "first\nafter the timeout\n" {
		t.Errorf("%d %q", res.StatusCode, body)
	}
}
