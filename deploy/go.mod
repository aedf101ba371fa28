module github.com/prefixring/prefixring/deploy

go 1.26.8
