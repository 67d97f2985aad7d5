module github.com/iii-go/iii

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/coder/websocket v1.8.15
	github.com/creack/pty v1.1.24
	github.com/google/go-cmp v0.7.0
	github.com/google/go-containerregistry v0.22.1
	github.com/iii-go/iii/compose v0.0.0
	github.com/iii-go/iii/engine v0.0.0
	github.com/iii-go/iii/updater v0.0.0
	github.com/iii-go/iii/workers v0.0.0
	github.com/magefile/mage v1.17.2
	github.com/nats-io/nats.go v1.48.0
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.5.0-default-no-op // indirect
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/gobwas/ws v1.4.0 // indirect
	github.com/google/go-tpm v0.9.7 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/iii-go/iii/internal/base v0.0.0
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/minio/highwayhash v1.0.4-0.20251030100505-070ab1a87a76 // indirect
	github.com/nats-io/jwt/v2 v2.8.0 // indirect
	github.com/nats-io/nats-server/v2 v2.12.3 // indirect
	github.com/nats-io/nkeys v0.4.12 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	golang.org/x/crypto v0.46.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	golang.org/x/time v0.14.0 // indirect
	golang.org/x/tools v0.49.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)

replace (
	github.com/iii-go/iii/compose => ./compose
	github.com/iii-go/iii/engine => ./engine
	github.com/iii-go/iii/updater => ./updater
	github.com/iii-go/iii/workers => ./workers
)

tool github.com/magefile/mage

replace github.com/iii-go/iii/internal/base => ./internal/base
