package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var payload = []byte("the one file of a static tree\n")

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// servers returns the URL of the same file over file://, over http:// with a Content-Length,
// and over http:// streamed without one (the size unknown until the end).
func servers(t *testing.T, data []byte) map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.tar.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f.tar.gz", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(sized.Close)
	streamed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for _, b := range data {
			w.Write([]byte{b})
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(streamed.Close)
	return map[string]string{
		"file":     "file://" + filepath.ToSlash(path),
		"sized":    sized.URL + "/f.tar.gz",
		"streamed": streamed.URL + "/f.tar.gz",
	}
}

func TestReadAllReadsTheFile(t *testing.T) {
	for name, u := range servers(t, payload) {
		got, err := ReadAll(context.Background(), u)
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: ReadAll = %q, %v; want %q", name, got, err, payload)
		}
	}
}

// TestMaxSize: a file of exactly the limit is read; one byte more is a *TooLargeError, at Open
// when the size is announced and while reading when it is not, and no data is returned.
func TestMaxSize(t *testing.T) {
	n := int64(len(payload))
	for name, u := range servers(t, payload) {
		if got, err := ReadAll(context.Background(), u, MaxSize(n)); err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: at the limit: %q, %v", name, got, err)
		}
		f, err := Open(context.Background(), u, MaxSize(n-1))
		var big *TooLargeError
		if name == "streamed" {
			if err != nil {
				t.Fatalf("%s: Open: %v", name, err)
			}
			read, err := io.ReadAll(f)
			f.Close()
			if !errors.As(err, &big) || big.Size != -1 || big.Limit != n-1 || int64(len(read)) != n-1 {
				t.Errorf("%s: over the limit: read %d bytes, error %v; want %d bytes and a *TooLargeError", name, len(read), err, n-1)
			}
			continue
		}
		if !errors.As(err, &big) || big.Size != n || big.Limit != n-1 {
			t.Errorf("%s: announced over the limit: %v; want a *TooLargeError with the announced size", name, err)
		}
		if got, err := ReadAll(context.Background(), u, MaxSize(n-1)); got != nil || !errors.As(err, &big) {
			t.Errorf("%s: ReadAll over the limit = %q, %v", name, got, err)
		}
	}
}

// TestSHA256: the right digest (in either case) reads to io.EOF; a wrong one ends the read with a
// *DigestError naming both digests, and ReadAll returns no data.
func TestSHA256(t *testing.T) {
	want := digest(payload)
	wrong := digest([]byte("another file"))
	for name, u := range servers(t, payload) {
		for _, d := range []string{want, strings.ToUpper(want)} {
			if got, err := ReadAll(context.Background(), u, SHA256(d)); err != nil || !bytes.Equal(got, payload) {
				t.Errorf("%s: right digest %s: %q, %v", name, d, got, err)
			}
		}
		got, err := ReadAll(context.Background(), u, SHA256(wrong))
		var bad *DigestError
		if got != nil || !errors.As(err, &bad) || bad.Got != want || bad.Want != wrong {
			t.Errorf("%s: wrong digest: %q, %v; want no data and a *DigestError", name, got, err)
		}
		// Each Read after the refusal repeats it.
		f, err := Open(context.Background(), u, SHA256(wrong))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, f)
		if _, err := f.Read(make([]byte, 8)); !errors.As(err, &bad) {
			t.Errorf("%s: Read after a digest mismatch: %v", name, err)
		}
		f.Close()
	}
}

// tlsClient makes the package's client trust httptest's certificate (every httptest TLS server
// shares it) for the rest of the test, keeping its redirect rule.
func tlsClient(t *testing.T, srv *httptest.Server) {
	old := client.Transport
	client.Transport = srv.Client().Transport
	t.Cleanup(func() { client.Transport = old })
}

func redirectTo(target string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusFound)
	})
}

// TestRedirects: redirects are followed to another host and from http up to https, but never from
// https down to http, at the first hop or later in the chain, and not past ten hops.
func TestRedirects(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer secure.Close()
	tlsClient(t, secure)
	down := httptest.NewTLSServer(redirectTo(plain.URL + "/f"))
	defer down.Close()
	across := httptest.NewTLSServer(redirectTo(secure.URL + "/f"))
	defer across.Close()
	up := httptest.NewServer(redirectTo(secure.URL + "/f"))
	defer up.Close()
	plainHop := httptest.NewServer(redirectTo(plain.URL + "/f"))
	defer plainHop.Close()
	laterDown := httptest.NewServer(redirectTo(down.URL + "/f"))
	defer laterDown.Close()
	loop := httptest.NewServer(nil)
	defer loop.Close()
	loop.Config.Handler = redirectTo(loop.URL + "/again")

	for name, u := range map[string]string{"https to another https host": across.URL, "http up to https": up.URL, "http to http": plainHop.URL} {
		if got, err := ReadAll(context.Background(), u); err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: %q, %v; want the file", name, got, err)
		}
	}
	for name, u := range map[string]string{"https down to http": down.URL, "http, https, then down to http": laterDown.URL} {
		want := "GET " + u + ": refused a redirect from https to plain http: " + plain.URL + "/f"
		if got, err := ReadAll(context.Background(), u); got != nil || !errors.Is(err, ErrDowngrade) || err.Error() != want {
			t.Errorf("%s: %q, %v; want ErrDowngrade: %s", name, got, err, want)
		}
	}
	if _, err := ReadAll(context.Background(), loop.URL); err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Errorf("endless redirects: %v", err)
	}
}

// TestTimeout: Timeout ends a server that never answers and one that stops in the middle of the
// body; a cancelled ctx stops the read of a local file too.
func TestTimeout(t *testing.T) {
	done := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("the first bytes"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	defer silent.Close()
	defer stalled.Close()
	defer close(done)

	start := time.Now()
	if _, err := Open(context.Background(), silent.URL, Timeout(100*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no answer: %v; want context.DeadlineExceeded", err)
	}
	f, err := Open(context.Background(), stalled.URL, Timeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("stalled body: Open: %v", err)
	}
	if _, err := io.ReadAll(f); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled body: %v; want context.DeadlineExceeded", err)
	}
	f.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the two timeouts of 100ms took %v", d)
	}

	u := servers(t, payload)["file"]
	ctx, cancel := context.WithCancel(context.Background())
	f, err = Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cancel()
	if _, err := f.Read(make([]byte, 4)); !errors.Is(err, context.Canceled) {
		t.Errorf("file read after cancel: %v", err)
	}
	if _, err := Open(ctx, u); !errors.Is(err, context.Canceled) {
		t.Errorf("file open after cancel: %v", err)
	}
}

// TestMissingAndRefused: a missing file, a directory and HTTP 404 are ErrNotFound, another HTTP
// status is a *StatusError naming it, and an unknown scheme is refused naming the URL.
func TestMissingAndRefused(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, u := range []string{"file://" + filepath.ToSlash(filepath.Join(dir, "missing")), "file://" + filepath.ToSlash(dir), srv.URL + "/missing"} {
		if _, err := Open(context.Background(), u); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), u) {
			t.Errorf("%s: %v; want ErrNotFound naming the URL", u, err)
		}
	}
	_, err := Open(context.Background(), srv.URL+"/broken")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != "500 Internal Server Error" || err.Error() != "GET "+srv.URL+"/broken: 500 Internal Server Error" {
		t.Errorf("HTTP 500: %v", err)
	}
	if _, err := Open(context.Background(), "ftp://example.com/f"); err == nil || !strings.Contains(err.Error(), `ftp://example.com/f: unsupported URL scheme "ftp"`) {
		t.Errorf("ftp: %v", err)
	}
}
