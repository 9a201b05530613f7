"""Tests of the Spark node image (ami/)."""
