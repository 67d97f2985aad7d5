module github.com/iii-go/iii/sandbox-libkrun

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/coder/websocket v1.8.15
	github.com/creack/pty v1.1.24
	github.com/google/go-containerregistry v0.22.1
	github.com/google/uuid v1.6.0
	github.com/iii-go/iii/engine v0.0.0
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/gobwas/ws v1.4.0 // indirect
	github.com/iii-go/iii/internal/base v0.0.0
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	golang.org/x/sync v0.22.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)

replace github.com/iii-go/iii/engine => ../engine

replace github.com/iii-go/iii/internal/base => ../internal/base
