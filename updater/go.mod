module github.com/iii-go/iii/updater

go 1.26.0
