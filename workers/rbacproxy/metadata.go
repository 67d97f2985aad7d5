package rbacproxy

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/rbac"
)

// The engine's discovery names (package engine/discovery, which the proxy does not link: it
// brings the whole engine); a test checks they agree.
const (
	fnFunctionInfo            = "engine::functions::info"
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

// metaCache holds functions' registered metadata per (namespace, function id), as
// engine::functions::info answered it, until drop, metaCacheTTL or eviction (at most max
// entries). A lookup that began before a drop does not store its (possibly stale) answer.
type metaCache struct {
	mu      sync.Mutex
	gen     uint64
	entries map[metaKey]metaEntry
	max     int
	ttl     time.Duration
	now     func() time.Time
}

func newMetaCache() *metaCache {
	return &metaCache{entries: map[metaKey]metaEntry{}, max: metaCacheMax, ttl: metaCacheTTL, now: time.Now}
}

// get is the cached metadata of id in ns, and whether there is a fresh entry.
func (m *metaCache) get(ns, id string) (json.RawMessage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[metaKey{ns, id}]
	if !ok {
		return nil, false
	}
	if m.now().Sub(e.at) > m.ttl {
		delete(m.entries, metaKey{ns, id})
		return nil, false
	}
	return e.meta, true
}

// generation is the cache's generation, to hand back to put.
func (m *metaCache) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// put stores what a lookup begun at generation gen read, unless the cache was dropped since.
func (m *metaCache) put(gen uint64, ns string, read map[string]json.RawMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen {
		return
	}
	now := m.now()
	for id, meta := range read {
		k := metaKey{ns, id}
		if _, ok := m.entries[k]; !ok && len(m.entries) >= m.max {
			for old := range m.entries { // evict one, any
				delete(m.entries, old)
				break
			}
		}
		m.entries[k] = metaEntry{meta: meta, at: now}
	}
}

// drop forgets every entry: the engine's function set changed.
func (m *metaCache) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	clear(m.entries)
}

// metadata is the registered metadata of ids in ns, from the cache or engine::functions::info
// (batches of batchMax, each within the handshake deadline; none after one that failed). An id
// the engine did not answer for is missing from the map: the caller judges it without
// metadata, so metadata filters do not expose it (fail closed).
func (p *Proxy) metadata(ctx context.Context, ns string, ids []string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(ids))
	var miss []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if meta, ok := p.meta.get(ns, id); ok {
			out[id] = meta
		} else {
			miss = append(miss, id)
		}
	}
	for len(miss) > 0 {
		batch := miss[:min(len(miss), batchMax)]
		miss = miss[len(batch):]
		gen := p.meta.generation()
		read, perr := p.readMetadata(ctx, ns, batch)
		if perr != nil { // the rest is not asked either: a list waits for one deadline at most
			p.log.Warn("function metadata unreadable: metadata filters do not expose these functions", "namespace", ns,
				"functions", len(batch)+len(miss), "code", perr.Code, "reason", perr.Message)
			break
		}
		p.meta.put(gen, ns, read)
		for id, meta := range read {
			out[id] = meta
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
