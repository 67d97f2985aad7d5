module github.com/iii-go/iii/sandbox-libkrun

go 1.26.0
