package rbacproxy

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
	"github.com/iii-go/iii/internal/base/errcode"
)

// The engine's discovery names (package engine/discovery, which the proxy does not link: it
// brings the whole engine); a test checks they agree.
const (
	fnFunctionInfo            = "engine::functions::info"
	fnListTriggerTypes        = "engine::triggers::list"
	triggerFunctionsAvailable = "engine::functions-available"
	batchMax                  = 32
)

// FnFunctionsChanged is the proxy's function bound to engine::functions-available: it drops the
// metadata cache.
const FnFunctionsChanged = "rbac-proxy::functions-changed"

// Bounds of the metadata cache: its entries, and how long one is trusted when no
// functions-available event came (one missed while the proxy's connection was down).
const (
	metaCacheMax = 4096
	metaCacheTTL = 30 * time.Second
)

// Binder is what Watch needs of the proxy's worker connection (a *protocol.Worker).
type Binder interface {
	Register(id string, h protocol.Handler, opts ...protocol.FuncOption) error
	RegisterTrigger(triggerType, functionID string, config any, opts ...protocol.TriggerOption) (string, error)
}

// Watch binds FnFunctionsChanged to engine::functions-available through b, so a function that
// registers again with other metadata is judged by its new metadata. Nothing is bound when no
// expose_functions entry has metadata conditions.
func (p *Proxy) Watch(b Binder) error {
	if len(p.metaNS) == 0 {
		return nil
	}
	if err := b.Register(FnFunctionsChanged, func(context.Context, json.RawMessage) (any, error) {
		p.meta.drop()
		return nil, nil
	}, protocol.WithDescription("drops the rbac-proxy's cache of functions' metadata (bound to "+triggerFunctionsAvailable+")")); err != nil {
		return err
	}
	_, err := b.RegisterTrigger(triggerFunctionsAvailable, FnFunctionsChanged, map[string]any{})
	return err
}

// metaNamespaces are the namespaces in which some expose_functions entry has metadata
// conditions: only there does a decision need a function's metadata.
func metaNamespaces(c *rbac.Config) map[string]bool {
	out := map[string]bool{}
	if c == nil {
		return out
	}
	for _, f := range c.Expose {
		if f.Metadata == nil {
			continue
		}
		ns := f.Namespace
		if ns == "" {
			ns = protocol.DefaultNamespace
		}
		out[ns] = true
	}
	return out
}

type metaKey struct{ ns, id string }

type metaEntry struct {
	meta json.RawMessage // nil: none, or the function is not registered
	at   time.Time
}

// flight is one function's metadata lookup in progress; concurrent lookups of it wait for it.
type flight struct {
	done chan struct{}
	meta json.RawMessage
	ok   bool // the engine answered for the function
}

// metaCache holds functions' registered metadata per (namespace, function id), as
// engine::functions::info answered it, until drop, metaCacheTTL or eviction (at most max
// entries), and the lookups in flight. A lookup that began before a drop does not store its
// (possibly stale) answer, and later lookups do not wait for it.
type metaCache struct {
	mu      sync.Mutex
	gen     uint64
	entries map[metaKey]metaEntry
	flights map[metaKey]*flight
	max     int
	ttl     time.Duration
	now     func() time.Time
}

func newMetaCache() *metaCache {
	return &metaCache{entries: map[metaKey]metaEntry{}, flights: map[metaKey]*flight{}, max: metaCacheMax, ttl: metaCacheTTL, now: time.Now}
}

// get is the cached metadata of id in ns, and whether there is a fresh entry.
func (m *metaCache) get(ns, id string) (json.RawMessage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.getLocked(metaKey{ns, id})
}

func (m *metaCache) getLocked(k metaKey) (json.RawMessage, bool) {
	e, ok := m.entries[k]
	if !ok {
		return nil, false
	}
	if m.now().Sub(e.at) > m.ttl {
		delete(m.entries, k)
		return nil, false
	}
	return e.meta, true
}

// claim sorts the distinct ids of ns into fresh entries (hits), lookups in flight to wait for,
// and the ids the caller is to look up (own, their flights in mine, to land), at generation gen.
func (m *metaCache) claim(ns string, ids []string) (hits map[string]json.RawMessage, wait, mine map[string]*flight, own []string, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hits, wait, mine = map[string]json.RawMessage{}, map[string]*flight{}, map[string]*flight{}
	for _, id := range ids {
		k := metaKey{ns, id}
		if _, dup := hits[id]; dup || wait[id] != nil || mine[id] != nil {
			continue
		}
		if meta, ok := m.getLocked(k); ok {
			hits[id] = meta
		} else if f := m.flights[k]; f != nil {
			wait[id] = f
		} else {
			f = &flight{done: make(chan struct{})}
			m.flights[k], mine[id] = f, f
			own = append(own, id)
		}
	}
	return hits, wait, mine, own, m.gen
}

// land completes the flights of ids with what the lookup begun at gen read (an id missing from
// read: unreadable) and caches it, unless the cache was dropped since.
func (m *metaCache) land(gen uint64, ns string, ids []string, mine map[string]*flight, read map[string]json.RawMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, id := range ids {
		k := metaKey{ns, id}
		meta, ok := read[id]
		if ok && gen == m.gen {
			if _, had := m.entries[k]; !had && len(m.entries) >= m.max {
				for old := range m.entries { // evict one, any
					delete(m.entries, old)
					break
				}
			}
			m.entries[k] = metaEntry{meta: meta, at: now}
		}
		f := mine[id]
		f.meta, f.ok = meta, ok
		if m.flights[k] == f {
			delete(m.flights, k)
		}
		close(f.done)
	}
}

// drop forgets every entry and lookup in flight: the engine's function set changed.
func (m *metaCache) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	clear(m.entries)
	m.flights = map[metaKey]*flight{}
}

// metadata is the registered metadata of ids in ns, from the cache, a lookup in flight or
// engine::functions::info (batches of batchMax, each within the handshake deadline; none after
// one that failed). An id the engine did not answer for is missing from the map: the caller
// judges it without metadata, so metadata filters do not expose it (fail closed).
func (p *Proxy) metadata(ctx context.Context, ns string, ids []string) map[string]json.RawMessage {
	out, wait, mine, own, gen := p.meta.claim(ns, ids)
	for i := 0; i < len(own); i += batchMax {
		batch := own[i:min(len(own), i+batchMax)]
		read, perr := p.readMetadata(ctx, ns, batch)
		if perr != nil { // the rest is not asked either: a list waits for one deadline at most
			p.log.Warn("function metadata unreadable: metadata filters do not expose these functions", "namespace", ns,
				"functions", len(own)-i, "code", perr.Code, "reason", perr.Message)
			p.meta.land(gen, ns, own[i:], mine, nil)
			break
		}
		p.meta.land(gen, ns, batch, mine, read)
		for id, meta := range read {
			out[id] = meta
		}
	}
	for id, f := range wait {
		select {
		case <-f.done:
			if f.ok {
				out[id] = f.meta
			}
		case <-ctx.Done():
		}
	}
	return out
}

// readMetadata asks the engine for the metadata of ids (at most batchMax) in ns. Every id asked
// is in the answer: a function the engine does not have has no metadata.
func (p *Proxy) readMetadata(ctx context.Context, ns string, ids []string) (map[string]json.RawMessage, *protocol.Error) {
	res, perr := p.call(ctx, fnFunctionInfo, map[string]any{"function_ids": ids, "namespace": ns}, p.handshake())
	if perr != nil {
		return nil, perr
	}
	var info struct {
		Functions []struct {
			FunctionID string          `json:"function_id"`
			Namespace  string          `json:"namespace"`
			Metadata   json.RawMessage `json:"metadata"`
			Error      string          `json:"error"`
		} `json:"functions"`
	}
	if err := json.Unmarshal(res, &info); err != nil || info.Functions == nil {
		return nil, protocol.NewError(errcode.InvocationFailed, "%s answered %.60s, not {functions: [...]}", fnFunctionInfo, res)
	}
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	out := make(map[string]json.RawMessage, len(ids))
	for _, f := range info.Functions {
		if !asked[f.FunctionID] {
			continue
		}
		if f.Error == "" && f.Namespace == ns && len(f.Metadata) > 0 && string(f.Metadata) != "null" {
			out[f.FunctionID] = f.Metadata
		} else if _, ok := out[f.FunctionID]; !ok {
			out[f.FunctionID] = nil
		}
	}
	for id := range asked {
		if _, ok := out[id]; !ok {
			return nil, protocol.NewError(errcode.InvocationFailed, "%s did not answer for %s", fnFunctionInfo, id)
		}
	}
	return out, nil
}
