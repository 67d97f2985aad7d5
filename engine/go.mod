module github.com/iii-go/iii/engine

go 1.26.0
