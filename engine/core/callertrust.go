package core

// HoldsNamespaceToken reports whether c is a worker connection of this engine that presented a
// token one of its token-protected namespaces accepts: a project token, or Compose's owner token
// (config.yaml namespaces:). Together with Caller.Owner (the owner credential) it tells the
// engine's own workers a caller the user handed a secret to from any other local process, a
// sandbox guest, an RBAC session without such a token, or a call relayed by another engine of
// a cluster (no connection here: never a holder). Built-ins that hand out values derived from
// the engine's environment (configuration placeholders) ask it.
func (e *Engine) HoldsNamespaceToken(c Caller) bool {
	if c.conn == nil || c.conn.token == "" {
		return false
	}
	for _, p := range e.opts.Namespaces {
		if p.accepts(c.conn.token) {
			return true
		}
	}
	return false
}
