package core

import (
	"crypto/subtle"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// TokenLookupHint says where `iii call` finds a token when neither III_TOKEN_FILE nor III_TOKEN
// is set; FORBIDDEN messages of protected functions name it.
const TokenLookupHint = "`iii call` presents the token of $III_TOKEN_FILE, else $III_TOKEN, else the one the " +
	"Compose serving this engine and namespace lists for the user who runs it in ~/.iii/compose/tokens/"

// mayCall reports whether caller may call f. Unprotected functions admit everyone; a protected
// one only the engine itself (caller nil) and connections whose token is the registering
// worker's, or is accepted by a token-protected namespace that also accepts the registering
// worker's token (the project token and Compose's owner token of one project).
func (e *Engine) mayCall(caller *conn, f *fnEntry) bool {
	if !f.frame.Protected || caller == nil {
		return true
	}
	if caller.token == "" {
		return false
	}
	if subtle.ConstantTimeCompare([]byte(caller.token), []byte(f.conn.token)) == 1 {
		return true
	}
	for _, p := range e.opts.Namespaces {
		if p.accepts(caller.token) && p.accepts(f.conn.token) {
			return true
		}
	}
	return false
}

// ProtectsNamespaces reports whether the engine has token-protected namespaces (config.yaml
// namespaces:); only then does a Compose attaching to it need its owner token granted there.
func (e *Engine) ProtectsNamespaces() bool { return len(e.opts.Namespaces) > 0 }

// accepts reports whether token is the policy's project token or owner token.
func (p NamespacePolicy) accepts(token string) bool {
	return tokenMatches(p.TokenFile, token) || tokenMatches(p.OwnerTokenFile, token)
}

// forbidden is the FORBIDDEN answer to a caller of protected function id in ns.
func forbidden(caller *conn, ns, id string, f *fnEntry) *protocol.Error {
	presented := "presented none"
	if caller.token != "" {
		presented = "presented a different one"
	}
	return protocol.NewError(errcode.Forbidden,
		"function '%s' in namespace '%s' is protected: only a connection holding the token of the worker that serves it ('%s') may call it, and this one %s. "+
			"For a Compose project that is the project token (.iii/compose/<namespace>/token beside the compose file); %s",
		id, ns, f.conn.name(), presented, TokenLookupHint)
}

// ClaimPrefix makes the functions whose ids start with prefix in ns exclusive (the sandbox
// router claims its bound adapter's "<adapter>::"): they must all come from one live
// connection, and, on an engine with token-protected namespaces, from a connection holding one
// of their tokens even when ns is not protected itself. A new claim replaces the previous one;
// an empty prefix drops it. Functions registered before the claim stay.
func (e *Engine) ClaimPrefix(ns, prefix string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if prefix == "" {
		e.claim = nil
		return
	}
	e.claim = &fkey{ns, prefix}
}

// checkClaim refuses a registration of id in ns by c that the exclusive prefix forbids: another
// live connection already serves a function under it (FUNCTION_PREFIX_CONFLICT), or the engine
// has token-protected namespaces and c holds none of their tokens. Call with e.mu held. It
// returns the code, the owner worker id for a conflict, and the message to log.
func (e *Engine) checkClaim(c *conn, ns, id string) (code, owner, msg string) {
	cl := e.claim
	if cl == nil || cl.ns != ns || !strings.HasPrefix(id, cl.id) {
		return "", "", ""
	}
	for k, f := range e.funcs {
		if k.ns == ns && f.conn != c && strings.HasPrefix(k.id, cl.id) {
			return errcode.FunctionPrefixConflict, f.conn.id, "the sandbox router is bound to '" + cl.id + "*' in namespace '" + ns +
				"' and worker " + f.conn.id + " already serves " + k.id + "; every function under that prefix must come from one worker"
		}
	}
	if _, protected := e.opts.Namespaces[ns]; protected || len(e.opts.Namespaces) == 0 {
		return "", "", "" // a protected namespace checked the token at engine::workers::register
	}
	if c.token == "" {
		return errcode.TokenRequired, "", "this engine has token-protected namespaces, so only a worker holding one of their tokens may serve the bound sandbox adapter '" +
			cl.id + "*' in namespace '" + ns + "'; the worker presented none"
	}
	for _, p := range e.opts.Namespaces {
		if p.accepts(c.token) {
			return "", "", ""
		}
	}
	return errcode.TokenInvalid, "", "the token presented for the bound sandbox adapter '" + cl.id + "*' in namespace '" + ns + "' matches no token-protected namespace of this engine"
}
