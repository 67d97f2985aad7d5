// Package fetch reads one file of a static tree (the updater's release tree, Compose's worker
// registry) over file://, http:// or https://, under one set of rules for every caller. A file://
// path must name a regular file (a device or a fifo never ends); a redirect never leads from
// https to plain http (a tree asked for over TLS is never read in clear); options bound the
// size, check the SHA-256 and end a fetch that hangs. Which URLs may be fetched at all is the
// caller's decision (the registry reads only its own scheme and host); this package only reads.
package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotFound is wrapped by the error for a file the tree does not have: a missing path or a
// directory over file://, HTTP 404.
var ErrNotFound = errors.New("not found")

// ErrNotRegular is wrapped by the error for a file:// path that names a device, a fifo or a
// socket: reading one may never end.
var ErrNotRegular = errors.New("not a regular file")

// ErrDowngrade is wrapped by the error for an https URL that redirected to a plain http one.
var ErrDowngrade = errors.New("refused a redirect from https to plain http")

// StatusError is an HTTP answer other than 2xx and 404.
type StatusError struct {
	URL    string // the URL asked for, without its password
	Status string // "500 Internal Server Error"
}

func (e *StatusError) Error() string { return "GET " + e.URL + ": " + e.Status }

// TooLargeError says a file is larger than MaxSize's limit.
type TooLargeError struct {
	URL   string
	Limit int64
	// Size is the size the server or the file system announced when that alone was over Limit
	// (nothing was read then), and -1 when the limit was passed while reading.
	Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s is %d bytes, more than the %d accepted", e.URL, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s is larger than the %d bytes accepted", e.URL, e.Limit)
}

// DigestError says a file's SHA-256 is not the one SHA256 expects.
type DigestError struct {
	URL, Got, Want string // Got and Want in lower-case hex
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s has SHA-256 %s, not the expected %s", e.URL, e.Got, e.Want)
}

// An Option sets how Open reads a file.
type Option func(*options)

type options struct {
	max     int64 // -1: no limit
	digest  string
	timeout time.Duration
}

// MaxSize refuses a file larger than n bytes with a *TooLargeError: at Open when its announced
// size (the file's size, HTTP Content-Length) is larger, else at the Read that would pass n. A
// server cannot fill the disk or the memory of the caller by sending more than it promised.
func MaxSize(n int64) Option { return func(o *options) { o.max = n } }

// SHA256 checks the file against the lower- or upper-case hex digest want: the Read that reaches
// the end returns a *DigestError instead of io.EOF when they differ. Bytes read before are
// unchecked until then, so a caller keeps nothing of a read that did not end with io.EOF.
func SHA256(want string) Option { return func(o *options) { o.digest = strings.ToLower(want) } }

// Timeout ends the fetch after d, reading included, on top of the deadline ctx may carry: a
// server that stops sending holds the caller no longer than d.
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// client is shared by every fetch: the default transport (proxies from the environment, as any
// Go program) and the one redirect rule.
var client = &http.Client{CheckRedirect: checkRedirect}

// maxRedirects is net/http's own bound on a chain of redirects.
const maxRedirects = 10

// checkRedirect follows at most maxRedirects redirects and never one from an https URL to a URL
// of another scheme: once a hop was read over TLS, the rest of the chain must be too.
// Redirects to other hosts are followed (release hosts redirect to their storage).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("%w: %s", ErrDowngrade, req.URL.Redacted())
	}
	return nil
}

// File is a file of the tree being read. Read it to io.EOF (which is when the digest is
// checked), then Close it.
type File struct {
	// Size is the announced length in bytes (the file's size, HTTP Content-Length), -1 when
	// unknown.
	Size int64

	url    string
	ctx    context.Context
	cancel context.CancelFunc
	body   io.ReadCloser
	max, n int64
	hash   hash.Hash
	want   string
	err    error // a refusal already returned, returned again by every later Read
}

// Open opens the file at raw (file://, http:// or https://) under ctx and opts. The error wraps
// ErrNotFound, ErrNotRegular or ErrDowngrade, or is a *StatusError or a *TooLargeError, when
// that is the reason; ctx's error when it ended.
func Open(ctx context.Context, raw string, opts ...Option) (*File, error) {
	o := options{max: -1}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	cancel := context.CancelFunc(func() {})
	if o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	body, size, err := open(ctx, u)
	if err == nil && o.max >= 0 && size > o.max {
		body.Close()
		err = &TooLargeError{URL: u.Redacted(), Limit: o.max, Size: size}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	f := &File{Size: size, url: u.Redacted(), ctx: ctx, cancel: cancel, body: body, max: o.max}
	if o.digest != "" {
		f.hash, f.want = sha256.New(), o.digest
	}
	return f, nil
}

// ReadAll opens raw and reads it whole under opts. On any error it returns no data.
func ReadAll(ctx context.Context, raw string, opts ...Option) ([]byte, error) {
	f, err := Open(ctx, raw, opts...)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Read reads the file, stopping with ctx's error once ctx ends (a local file as an HTTP body),
// a *TooLargeError past MaxSize and a *DigestError at the end when SHA256's digest differs.
func (f *File) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if err := f.ctx.Err(); err != nil {
		return 0, err
	}
	if f.max >= 0 && int64(len(p)) > f.max-f.n+1 {
		p = p[:f.max-f.n+1] // one byte past the limit tells a file of exactly max bytes from a larger one
	}
	n, err := f.body.Read(p)
	if f.max >= 0 && f.n+int64(n) > f.max {
		n = int(f.max - f.n)
		err = &TooLargeError{URL: f.url, Limit: f.max, Size: -1}
		f.err = err
	}
	f.n += int64(n)
	if f.hash != nil {
		f.hash.Write(p[:n])
		if err == io.EOF {
			if got := hex.EncodeToString(f.hash.Sum(nil)); got != f.want {
				err = &DigestError{URL: f.url, Got: got, Want: f.want}
				f.err = err
			}
		}
	}
	return n, err
}

// Close releases the file and the fetch's timeout.
func (f *File) Close() error {
	err := f.body.Close()
	f.cancel()
	return err
}

// open returns the body of u and its announced size (-1 when unknown).
func open(ctx context.Context, u *url.URL) (io.ReadCloser, int64, error) {
	switch u.Scheme {
	case "file":
		return openFile(ctx, u)
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, 0, err
		}
		resp, err := client.Do(req)
		var ue *url.Error
		if errors.Is(err, ErrDowngrade) && errors.As(err, &ue) {
			// net/http names the refused target only; name the URL asked for as well.
			return nil, 0, fmt.Errorf("GET %s: %w", u.Redacted(), ue.Err)
		}
		if err != nil {
			return nil, 0, err
		}
		switch {
		case resp.StatusCode == http.StatusNotFound:
			resp.Body.Close()
			return nil, 0, fmt.Errorf("%s: %w", u.Redacted(), ErrNotFound)
		case resp.StatusCode/100 != 2:
			resp.Body.Close()
			return nil, 0, &StatusError{URL: u.Redacted(), Status: resp.Status}
		}
		return resp.Body, resp.ContentLength, nil
	}
	return nil, 0, fmt.Errorf("%s: unsupported URL scheme %q (want file://, http:// or https://)", u.Redacted(), u.Scheme)
}

// openFile opens a file:// URL's path. It looks before it opens, so that a fifo, which blocks
// an open until a writer comes, is refused rather than waited for; the open file is checked
// again in case the path changed in between.
func openFile(ctx context.Context, u *url.URL) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	name := filepath.FromSlash(u.Path)
	st, err := os.Stat(name)
	if err == nil && !st.IsDir() && !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: %w", u, ErrNotRegular)
	}
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s: %w", u, ErrNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, 0, err
	}
	switch {
	case st.IsDir():
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", u, ErrNotFound)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", u, ErrNotRegular)
	}
	return f, st.Size(), nil
}
