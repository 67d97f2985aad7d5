module github.com/iii-go/iii/updater

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/iii-go/iii/engine v0.0.0
)

require (
	github.com/google/go-cmp v0.7.0
	github.com/iii-go/iii/internal/base v0.0.0
)

replace github.com/iii-go/iii/engine => ../engine

replace github.com/iii-go/iii/internal/base => ../internal/base
