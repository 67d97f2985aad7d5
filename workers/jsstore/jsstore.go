// Package jsstore opens the NATS JetStream the queue, state and cron workers keep their data
// in: a nats-server embedded in the worker's process by default (data under
// ~/.iii/data/<worker>/<namespace>/, no network port unless one is configured), or an external
// NATS server or cluster given by URL. Several engines pointed at one cluster share its streams
// and key-value buckets: that is how a deployment grows past one machine.
package jsstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is the storage part of a worker's configuration (config keys under nats:).
type Config struct {
	// URL of an external NATS server or cluster (comma-separated seeds), "" for the embedded
	// server.
	URL string `yaml:"url" json:"url"`
	// DataDir of the embedded server (default ~/.iii/data/<worker>/<namespace>).
	DataDir string `yaml:"data_dir" json:"data_dir"`
	// Listen is a host:port on which the embedded server also accepts clients (other engines'
	// workers); "" opens no port. Only loopback addresses are accepted unless AllowRemote.
	Listen string `yaml:"listen" json:"listen"`
	// AllowRemote lets Listen name a non-loopback address.
	AllowRemote bool `yaml:"allow_remote" json:"allow_remote"`
	// Sync is "always" (the default: every stored message is fsynced before it is acknowledged)
	// or "interval" (nats-server's default, faster, may lose the last writes on power loss).
	Sync string `yaml:"sync" json:"sync"`
	// CredsFile is a NATS credentials file for the external URL.
	CredsFile string `yaml:"creds_file" json:"creds_file"`
}

// Store is an open JetStream.
type Store struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	srv *server.Server
	tmp string // the directory of an in-memory placement, removed by Close
}

// DefaultDataDir is ~/.iii/data/<worker>/<namespace>.
func DefaultDataDir(worker, namespace string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return iiidir.Under(home, iiidir.DataDir, worker, namespace), nil
}

// Open connects to cfg.URL, or starts the embedded server in dataDir (cfg.DataDir when set).
func Open(ctx context.Context, cfg Config, dataDir, name string) (*Store, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(200 * time.Millisecond)}
	if cfg.URL != "" {
		if cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		}
		nc, err := nats.Connect(cfg.URL, append(opts, nats.RetryOnFailedConnect(false))...)
		if err != nil {
			return nil, fmt.Errorf("connecting to NATS at %s (nats.url): %w", cfg.URL, err)
		}
		return wrap(nc, nil)
	}
	if cfg.DataDir != "" {
		dataDir = cfg.DataDir
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory %s (nats.data_dir): %w", dataDir, err)
	}
	so := &server.Options{
		ServerName: name, JetStream: true, StoreDir: dataDir, DontListen: true, NoSigs: true, NoLog: true,
		JetStreamMaxMemory: 64 << 20,
	}
	if cfg.Sync != "interval" {
		so.SyncAlways = true
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats.listen %q: %w", cfg.Listen, err)
		}
		if ip := net.ParseIP(host); !cfg.AllowRemote && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("nats.listen %q is not a loopback address; set nats.allow_remote to listen there", cfg.Listen)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats.listen %q: bad port", cfg.Listen)
		}
		so.DontListen, so.Host, so.Port = false, host, p
	}
	srv, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded NATS server in %s: %w", dataDir, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("the embedded NATS server did not become ready within 10s")
	}
	nc, err := nats.Connect("", append(opts, nats.InProcessServer(srv))...)
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	return wrap(nc, srv)
}

func wrap(nc *nats.Conn, srv *server.Server) (*Store, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		if srv != nil {
			srv.Shutdown()
		}
		return nil, err
	}
	return &Store{NC: nc, JS: js, srv: srv}, nil
}

// ClientURL is the URL other processes reach the embedded server at ("" without a port).
func (s *Store) ClientURL() string {
	if s.srv == nil || s.srv.Addr() == nil {
		return ""
	}
	return s.srv.ClientURL()
}

// Close drains the connection and stops the embedded server (and removes an in-memory
// placement's directory).
func (s *Store) Close() {
	_ = s.NC.Drain()
	s.NC.Close()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// OpenPlaced is Open where the adapter placed the data: file_path as the embedded server's
// directory, in_memory in a fresh directory of its own that Close removes, so a restarted
// worker starts empty whatever the previous one left (a killed worker's directory is never
// read again).
func OpenPlaced(ctx context.Context, cfg Config, p Placement, dataDir, name string) (*Store, error) {
	if !p.Memory {
		if p.Dir != "" {
			dataDir = p.Dir
		}
		return Open(ctx, cfg, dataDir, name)
	}
	tmp, err := os.MkdirTemp("", name+"-memory-")
	if err != nil {
		return nil, fmt.Errorf("creating the in-memory store's directory (adapter.config.store_method in_memory): %w", err)
	}
	s, err := Open(ctx, cfg, tmp, name)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	s.tmp = tmp
	return s, nil
}
