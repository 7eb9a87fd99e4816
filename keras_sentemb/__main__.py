from keras_sentemb.cli import main

raise SystemExit(main())
