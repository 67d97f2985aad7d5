package qemu

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// How long the host's answer for a name is kept, an answer that failed, the wait for one, and
// how many names the guest looked up through a wildcard entry are remembered.
const (
	nameTTL      = 30 * time.Second
	nameFailTTL  = 5 * time.Second
	nameTimeout  = 2 * time.Second
	learnedNames = 1024
)

// nameCache is the host-side resolution behind a policy's name entries: a name entry permits the
// addresses the adapter resolves the name to, never what the guest claims. A wildcard entry
// stands for the names under it that the guest has looked up (each allowed query is learned),
// resolved the same way. Lookups run in the notification handler, so a slow resolver delays the
// checked call by at most nameTimeout.
type nameCache struct {
	lookup func(ctx context.Context, name string) ([]netip.Addr, error)
	now    func() time.Time

	mu      sync.Mutex
	addrs   map[string]cachedAddrs
	learned map[string]time.Time // name → when the guest last looked it up
}

type cachedAddrs struct {
	addrs   []netip.Addr
	expires time.Time
}

func newNameCache() *nameCache {
	return &nameCache{
		lookup: func(ctx context.Context, name string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		},
		now:     time.Now,
		addrs:   map[string]cachedAddrs{},
		learned: map[string]time.Time{},
	}
}

// Addrs gives the addresses r stands for (vm.Resolver).
func (c *nameCache) Addrs(r vm.EgressRule) []netip.Addr {
	if !strings.HasPrefix(r.Name, "*.") {
		return c.resolve(r.Name)
	}
	var names []string
	c.mu.Lock()
	for n := range c.learned {
		if r.MatchName(n) {
			names = append(names, n)
		}
	}
	c.mu.Unlock()
	var out []netip.Addr
	for _, n := range names {
		out = append(out, c.resolve(n)...)
	}
	return out
}

// learn records that the guest looked up name (an allowed query) and resolves it now, so its
// addresses are known when the guest connects.
func (c *nameCache) learn(name string) {
	now := c.now()
	c.mu.Lock()
	if len(c.learned) >= learnedNames {
		for n, at := range c.learned {
			if now.Sub(at) > nameTTL {
				delete(c.learned, n)
			}
		}
	}
	if _, ok := c.learned[name]; ok || len(c.learned) < learnedNames {
		c.learned[name] = now
	}
	c.mu.Unlock()
	c.resolve(name)
}

func (c *nameCache) resolve(name string) []netip.Addr {
	now := c.now()
	c.mu.Lock()
	e, ok := c.addrs[name]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
	addrs, err := c.lookup(ctx, name)
	cancel()
	e = cachedAddrs{expires: now.Add(nameTTL)}
	if err != nil {
		e.expires = now.Add(nameFailTTL)
	}
	for _, a := range addrs {
		e.addrs = append(e.addrs, a.Unmap())
	}
	c.mu.Lock()
	if len(c.addrs) >= learnedNames {
		for n, old := range c.addrs {
			if now.After(old.expires) {
				delete(c.addrs, n)
			}
		}
	}
	c.addrs[name] = e
	c.mu.Unlock()
	return e.addrs
}
