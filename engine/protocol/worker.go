package protocol

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-go/iii/engine/internal/batchconn"
)

// The environment variables Config.FromEnv reads, as iii's SDKs do.
const (
	EnvURL        = "III_URL"
	EnvNamespace  = "III_NAMESPACE"
	EnvWorkerName = "III_WORKER_NAME"
	EnvTokenFile  = "III_TOKEN_FILE"
	// EnvToken holds the project token itself, as 0.26 SDKs read it; used when no token file is
	// configured (a file is preferred: it never shows in the environment of other processes).
	EnvToken = "III_TOKEN"
)

// DefaultURL is where the engine listens unless configured otherwise.
const DefaultURL = "ws://127.0.0.1:49134"

// DefaultNamespace is the namespace of workers and calls that name none.
const DefaultNamespace = "default"

// MaxFrameBytes is the largest frame either side reads.
const MaxFrameBytes = 64 << 20

// Config says how a Worker connects. A Config is used as it is: it never reads the environment
// itself; FromEnv fills its empty fields from the variables a worker's main hands it.
type Config struct {
	URL         string // engine address; default DefaultURL (FromEnv: $III_URL)
	Namespace   string // namespace to register in; default "default" (FromEnv: $III_NAMESPACE)
	Name        string // worker name shown by engine::workers::list (FromEnv: $III_WORKER_NAME)
	Description string // free text shown by engine::workers::list
	Version     string // the worker's own version, reported at registration
	TokenFile   string // file holding the project token (FromEnv: $III_TOKEN_FILE)
	Token       string // the project token, when there is no TokenFile (FromEnv: $III_TOKEN)
	NoReconnect bool   // fail instead of retrying when the connection drops or cannot be made
	Logger      *slog.Logger
}

// FromEnv returns c with its empty URL, Namespace, Name and TokenFile taken from $III_URL,
// $III_NAMESPACE, $III_WORKER_NAME and $III_TOKEN_FILE of getenv, and, when it has neither a
// token file nor a token, Token from $III_TOKEN: what iii's SDKs read, and what Compose sets for
// its workers. getenv is the worker's environment (os.Getenv in its main); nil is an empty one.
func (c Config) FromEnv(getenv func(string) string) Config {
	if getenv == nil {
		return c
	}
	fill := func(field *string, name string) {
		if *field == "" {
			*field = getenv(name)
		}
	}
	fill(&c.URL, EnvURL)
	fill(&c.Namespace, EnvNamespace)
	fill(&c.Name, EnvWorkerName)
	fill(&c.TokenFile, EnvTokenFile)
	if c.TokenFile == "" {
		fill(&c.Token, EnvToken)
	}
	return c
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Worker is a connection to the engine that serves registered functions and makes calls.
type Worker struct {
	cfg Config

	ctx    context.Context
	cancel context.CancelFunc

	mu           sync.Mutex
	funcs        map[string]*function
	trig         triggerState
	conn         *link
	up           chan struct{}                        // closed while conn is registered
	fns          atomic.Pointer[map[string]*function] // a copy of funcs for serve, replaced on every change
	pending      pendingCalls                         // calls awaiting their invocationresult
	workerID     string
	started      bool
	everUp       bool // the first Start succeeded; later losses reconnect in the background
	reconnecting atomic.Bool
	done         chan struct{}
	err          error
}

// NewWorker returns an unconnected worker. Register functions, then Start it.
func NewWorker(cfg Config) *Worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &Worker{
		cfg: cfg.withDefaults(),
		ctx: ctx, cancel: cancel,
		funcs: map[string]*function{}, up: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// Connect is NewWorker followed by Start, for workers that only call functions or register later.
func Connect(ctx context.Context, cfg Config) (*Worker, error) {
	w := NewWorker(cfg)
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Namespace is the namespace the worker registers in.
func (w *Worker) Namespace() string { return w.cfg.Namespace }

// URL is the engine address the worker connects to.
func (w *Worker) URL() string { return w.cfg.URL }

// WorkerID is the id the engine gave the current connection.
func (w *Worker) WorkerID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workerID
}

// Done is closed when the worker stops for good: Close, or a refused registration.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err says why Done closed (nil after Close).
func (w *Worker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Worker) liveConn() *link {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.liveConnLocked()
}

func (w *Worker) liveConnLocked() *link {
	select {
	case <-w.up:
		return w.conn
	default:
		return nil
	}
}

func (w *Worker) write(c *link, m *Message) error {
	return c.send(m)
}

func (w *Worker) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return
	default:
	}
	w.err = err
	close(w.done)
}

// Close disconnects and stops reconnecting. In-flight handlers see their context cancelled.
func (w *Worker) Close() error {
	w.stop(nil)
	w.mu.Lock()
	c := w.conn
	w.mu.Unlock()
	if c != nil {
		c.drain(time.Second) // frames sent before Close still leave
	}
	w.cancel()
	if c != nil {
		return c.ws.CloseStatus(batchconn.StatusNormalClosure, "worker closing", time.Second)
	}
	return nil
}
