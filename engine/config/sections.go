package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Cluster joins engines that share functions over NATS (cluster: {key_file, insecure, nats:
// {url, creds_file, nkey_file, tls_cert_file, tls_key_file, tls_ca_file}}). Paths are made
// absolute against the config file's directory.
type Cluster struct {
	URL       string // one or more nats:// URLs, comma-separated
	CredsFile string // a NATS credentials file; "" for none
	NkeyFile  string // a NATS nkey seed file; "" for none
	// TLSCertFile and TLSKeyFile are the engine's TLS client certificate and key, TLSCAFile the
	// servers' CA; "" for none.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// KeyFile holds the cluster key the engines share (mode 0600); required.
	KeyFile string
	// Insecure admits a NATS link without credentials (a warning says so at start).
	Insecure bool
}

// Sandbox is the top-level sandbox: section, which binds the sandbox router (req E3).
type Sandbox struct {
	Adapter   string // function prefix of the adapter
	Namespace string // namespace the adapter runs in
}

// Namespace is one token-protected namespace.
type Namespace struct {
	Name           string
	TokenFile      string // absolute
	OwnerTokenFile string // absolute; empty when no one holds owner rights through this namespace
}

// adapterSettings are sandbox-libkrun's own keys; 0.25 read them from the engine config, 0.26
// from the adapter container's config_override (req C1).
var adapterSettings = map[string]bool{
	"auto_install": true, "image_allowlist": true, "custom_images": true, "default_idle_timeout_secs": true,
	"max_concurrent_sandboxes": true, "max_concurrent_exec_per_sandbox": true, "max_exec_timeout_ms": true,
	"default_cpus": true, "default_memory_mb": true, "per_image_caps": true, "warm_pool": true,
}

func parseSandbox(v *yaml.Node) (*Sandbox, error) {
	s := &Sandbox{Adapter: DefaultSandboxAdapter, Namespace: DefaultSandboxNamespace}
	if v.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(v.Content); i += 2 {
			if k := v.Content[i]; adapterSettings[k.Value] {
				return nil, invalid(k.Line, "%q is a setting of the sandbox adapter, not of the engine: put it under "+
					"config_override of the sandbox-libkrun container in worker-compose.yaml; sandbox: holds only adapter and namespace", k.Value)
			}
		}
	}
	err := mapping(v, "sandbox", []string{"adapter", "namespace"}, func(k, v *yaml.Node) error {
		val, err := strValue(v, k.Value)
		if err != nil {
			return err
		}
		if strings.TrimSpace(val) == "" {
			return invalid(v.Line, "sandbox.%s must not be empty", k.Value)
		}
		if k.Value == "adapter" {
			s.Adapter = val
		} else {
			s.Namespace = val
		}
		return nil
	})
	return s, err
}

// parseCluster reads cluster: {key_file, insecure, nats: {url, creds_file, nkey_file,
// tls_cert_file, tls_key_file, tls_ca_file}}. A NATS link without credentials is refused
// unless insecure is true: the engines trust what arrives on it.
func parseCluster(v *yaml.Node, baseDir string) (*Cluster, error) {
	c := &Cluster{}
	abs := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(baseDir, p)
		}
		return p
	}
	err := mapping(v, "cluster", []string{"nats", "key_file", "insecure"}, func(k, n *yaml.Node) error {
		switch k.Value {
		case "key_file":
			val, err := strValue(n, "cluster.key_file")
			c.KeyFile = abs(val)
			return err
		case "insecure":
			var err error
			c.Insecure, err = boolValue(n, "cluster.insecure")
			return err
		}
		return mapping(n, "cluster.nats", []string{"url", "creds_file", "nkey_file", "tls_cert_file", "tls_key_file", "tls_ca_file"}, func(k, v *yaml.Node) error {
			val, err := strValue(v, "cluster.nats."+k.Value)
			if err != nil {
				return err
			}
			if k.Value == "url" {
				for _, u := range strings.Split(val, ",") {
					if u = strings.TrimSpace(u); !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
						return invalid(v.Line, "cluster.nats.url: %q is not a nats:// or tls:// URL (several are comma-separated)", u)
					}
				}
				c.URL = val
				return nil
			}
			*map[string]*string{"creds_file": &c.CredsFile, "nkey_file": &c.NkeyFile, "tls_cert_file": &c.TLSCertFile,
				"tls_key_file": &c.TLSKeyFile, "tls_ca_file": &c.TLSCAFile}[k.Value] = abs(val)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	switch {
	case c.URL == "":
		return nil, invalid(v.Line, "cluster.nats.url is required: the NATS servers the engines share")
	case c.KeyFile == "":
		return nil, invalid(v.Line, "cluster.key_file is required: the file (mode 0600) holding the key the engines of the cluster share, so that they admit only each other")
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return nil, invalid(v.Line, "cluster.nats: tls_cert_file and tls_key_file go together (the engine's TLS client certificate and its key)")
	case c.CredsFile == "" && c.NkeyFile == "" && c.TLSCertFile == "" && !c.Insecure:
		return nil, invalid(v.Line, "cluster.nats.url is given without credentials (creds_file, nkey_file, or tls_cert_file and tls_key_file); set cluster.insecure: true to join an unauthenticated NATS on purpose")
	}
	return c, nil
}

func parseNamespaces(v *yaml.Node, baseDir string) ([]Namespace, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, invalid(v.Line, "namespaces must be a list of {name, token_file, owner_token_file}")
	}
	var out []Namespace
	seen := map[string]bool{}
	for _, e := range v.Content {
		var n Namespace
		err := mapping(e, "namespaces entry", []string{"name", "token_file", "owner_token_file"}, func(k, v *yaml.Node) error {
			var err error
			switch k.Value {
			case "name":
				n.Name, err = strValue(v, k.Value)
			case "token_file":
				n.TokenFile, err = strValue(v, k.Value)
			case "owner_token_file":
				n.OwnerTokenFile, err = strValue(v, k.Value)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if n.Name == "" || n.TokenFile == "" {
			return nil, invalid(e.Line, "a namespaces entry needs name and token_file")
		}
		if n.Name == DefaultSandboxNamespace {
			return nil, invalid(e.Line, "the default namespace cannot be token-protected")
		}
		if seen[n.Name] {
			return nil, invalid(e.Line, "namespace %q listed twice", n.Name)
		}
		seen[n.Name] = true
		if !filepath.IsAbs(n.TokenFile) {
			n.TokenFile = filepath.Join(baseDir, n.TokenFile)
		}
		if n.OwnerTokenFile != "" && !filepath.IsAbs(n.OwnerTokenFile) {
			n.OwnerTokenFile = filepath.Join(baseDir, n.OwnerTokenFile)
		}
		for _, f := range []string{n.TokenFile, n.OwnerTokenFile} {
			if err := checkTokenFile(n.Name, f); err != nil {
				return nil, invalid(e.Line, "%w", err)
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// checkTokenFile requires a token file (when named) to be a regular file only its owner reads.
func checkTokenFile(ns, file string) error {
	if file == "" {
		return nil
	}
	st, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("token file %s of namespace %q: %w", file, ns, errors.Unwrap(err))
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("token file %s of namespace %q is not a regular file", file, ns)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("token file %s of namespace %q must have mode 0600, has %#o", file, ns, st.Mode().Perm())
	}
	return nil
}
