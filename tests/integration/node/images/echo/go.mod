module github.com/ensemble-operator/tests/echo

go 1.26.0
