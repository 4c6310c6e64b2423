#!/bin/sh
# Checker: a plain shell worker the lead adds with add_task. $1 is its task, $2 its prompt.
echo "@supervisor progress: checking for task $1"
echo "checked: $2"
