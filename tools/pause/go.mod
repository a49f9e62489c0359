module github.com/ensemble-operator/tools/pause

go 1.26.0
