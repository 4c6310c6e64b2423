#!/bin/sh
# Publisher: a plain shell worker. With input = "text" each answer arrives as one line.
echo "publishing for task $1"
echo "@supervisor progress: building the site"
sleep 0.3
echo "@supervisor need_confirmation: Upload the site to staging now?"
read -r answer || exit 1     # end of input: the leader has gone
case "$answer" in
  y*|Y*) echo "@supervisor progress: uploading"; sleep 0.3; echo "uploaded to staging" ;;
  *)     echo "not uploading"; exit 1 ;;
esac
