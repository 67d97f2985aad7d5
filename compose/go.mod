module github.com/iii-go/iii/compose

go 1.26.0
