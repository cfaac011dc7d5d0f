#!/bin/sh
cp table.bin /tmp/table.bin
